"""The built-in policy's compiler: from a task's Model to CUDA (or C++) kernels and the
ModelNew that calls them. pipeline.build_plan runs it: capture the graph, rewrite it, partition
it into kernels, recompute what is cheaper than storing, and generate each kernel for the
target (cuda/ or cpu/). The search over launch variants is the policy's, in
kernelsmith/backends/builtin.py. See docs/builtin.md."""
