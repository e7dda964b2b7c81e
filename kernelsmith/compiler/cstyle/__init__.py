"""C text both targets share: pointwise ops as C expressions, how a kernel reads an input at a
flat index, and the window walks of pooling and convolution."""
