"""kernelsmith: turn PyTorch modules into fast, verified CUDA kernels."""

__version__ = "0.1.0"
# 2: timed runs watched natively, not by a Python dispatch mode
# 3: a jail, sealed trusted state, timers and outputs checked from outside
# 3.1: the candidate's timed inputs are fresh draws, under seeds from the parent, which checks them
# 3.2: eager's timed runs draw fresh inputs too; verify's outputs reach the judge in buffers it owns; the
#      census also reads the CPU time of children reaped inside a timed run; the compute lock is per GPU UUID
# 3.3: baselines credited at the faster of two timers; work outside the timed window charged by the parent's
#      clock, against eager and against a calibration taken before the candidate's import; the parent reads
#      what the profile worker maps
# 3.4: the patch check covers the harness's classes, code and closures swapped in place, the timed loop's objects
#      and the reference's module; eager's cycle growth over the calibration is charged to the candidate
# 3.5: only eager's spread says a machine is busy; a jittery candidate is credited by the larger of median and mean
# 3.6: the CPU time that the candidate's own threads spend beside the harness's loop is charged (runner.ParentClock)
# 3.7: that CPU time read from each process's CPU clock (exited threads included) less the harness threads'
# 3.8: a profile, trace or monitoring hook installed by the candidate is a violation (guards.Observers)
# 3.9: that CPU time read from the run's input draw, while the worker waits (no phantom time of its main thread)
# 3.10: a run's cycle on the parent's clock starts at its input draw (spot checks are no run's)
# 3.11: a jailed worker's process census walks its tree by each thread's children (not a scan of all /proc),
#       about 50x cheaper a look, so a run's cycle holds less of the parent's work
HARNESS_VERSION = "3.11"
