"""The built-in offline policy: capture the task's graph, partition it into fusable groups,
generate a kernel for each (CUDA, or C++ with OpenMP for the CPU), and search launch variants
through the same tools an LLM uses. See docs/builtin.md."""
