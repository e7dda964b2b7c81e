"""`kernelsmith train`: trajectories from session records, RFT, value pretraining and PPO on KernelEnv
(issue 19). Parent-side code: it drives sessions and reads their records; nothing here runs in a jail."""
