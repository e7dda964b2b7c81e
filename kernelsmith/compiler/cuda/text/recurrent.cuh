// Recurrent layers (nn.LSTM, nn.GRU), run by a recurrent group's launcher (cuda/recurrent.py): per layer and
// direction, the input projection of every step as one cuBLAS SGEMM, then per step the recurrent SGEMM
// h @ W_hh^T and one pointwise cell kernel, all on the caller's stream.

// A layer stack's sizes. Row (t, b) of x, of the input projection and of an output sequence is
// t * batch + b, or b * seq + t when batch_first.
struct KsRnn {
  int64_t seq, batch, input, hidden, layers, directions, gates;
  bool batch_first, lstm, has_biases;
  int threads;  // the cell kernel's block size (the launch variant)
  __host__ __device__ int64_t row(int64_t t) const { return batch_first ? t : t * batch; }  // the row of (t, 0)
  __host__ __device__ int64_t batch_rows() const { return batch_first ? seq : 1; }  // rows from (t, b) to (t, b + 1)
  int64_t rows() const { return seq * batch; }
  int64_t state() const { return batch * hidden; }  // one [batch, hidden] state
  int64_t weights_per_layer() const { return has_biases ? 4 : 2; }
};

// c[m, n] = a[m, k] @ w[n, k]^T + beta * c, a's rows lda apart (cuBLAS, in the group's _gemm.cu).
typedef int (*KsRnnGemm)(int m, int n, int k, const float* a, int lda, const float* w, float* c, float beta,
                         cudaStream_t stream);

// One step of one direction: where its rows lie.
struct KsRnnStep {
  const float* xg; int64_t xg_ld;          // the input projection of batch row b at xg + b * xg_ld (no bias)
  const float* hg;                         // h_prev @ W_hh^T, [batch, gates * hidden] (no bias)
  const float* h_prev; int64_t h_prev_ld;  // the previous h (h0 at the first step)
  float* h; int64_t h_ld;                  // the step's h, in the layer's output sequence
  float* c;                                // LSTM's cell state [batch, hidden], updated in place
  const float* b_ih; const float* b_hh;    // nullptr without biases
};

__device__ __forceinline__ float ks_rnn_sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }
__device__ __forceinline__ float ks_rnn_bias(const float* b, int64_t i) { return b ? __ldg(b + i) : 0.0f; }

// A gate's input before its activation: projection + recurrent product + both biases.
__device__ __forceinline__ float ks_rnn_gate(const KsRnnStep& p, const float* x, const float* hg, int64_t i) {
  return x[i] + hg[i] + ks_rnn_bias(p.b_ih, i) + ks_rnn_bias(p.b_hh, i);
}

// torch's LSTM cell, gates i, f, g, o: c = f * c + i * g, h = o * tanh(c). One thread per (b, j).
__global__ void ks_lstm_cell(const KsRnnStep p, int64_t batch, int64_t hidden) {
  const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= batch * hidden) return;
  const int64_t b = e / hidden, j = e % hidden, H = hidden;
  const float* x = p.xg + b * p.xg_ld;
  const float* hg = p.hg + b * 4 * H;
  const float i = ks_rnn_sigmoid(ks_rnn_gate(p, x, hg, j));
  const float f = ks_rnn_sigmoid(ks_rnn_gate(p, x, hg, H + j));
  const float g = tanhf(ks_rnn_gate(p, x, hg, 2 * H + j));
  const float o = ks_rnn_sigmoid(ks_rnn_gate(p, x, hg, 3 * H + j));
  const float c = f * p.c[e] + i * g;
  p.c[e] = c;
  p.h[b * p.h_ld + j] = o * tanhf(c);
}

// torch's GRU cell, gates r, z, n: n = tanh(x_n + b_in + r * (h_n + b_hn)), h = (1 - z) * n + z * h_prev.
__global__ void ks_gru_cell(const KsRnnStep p, int64_t batch, int64_t hidden) {
  const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= batch * hidden) return;
  const int64_t b = e / hidden, j = e % hidden, H = hidden;
  const float* x = p.xg + b * p.xg_ld;
  const float* hg = p.hg + b * 3 * H;
  const float r = ks_rnn_sigmoid(ks_rnn_gate(p, x, hg, j));
  const float z = ks_rnn_sigmoid(ks_rnn_gate(p, x, hg, H + j));
  const int64_t k = 2 * H + j;
  const float n = tanhf(x[k] + ks_rnn_bias(p.b_ih, k) + r * (hg[k] + ks_rnn_bias(p.b_hh, k)));
  p.h[b * p.h_ld + j] = (1.0f - z) * n + z * p.h_prev[b * p.h_prev_ld + j];
}

// Where one layer and direction starts and ends its states (slices of h0, c0, h_n, c_n, or scratch).
struct KsRnnState {
  const float* h0; const float* c0;
  float* h_n;  // nullptr when nothing reads it
  float* c;    // LSTM's running cell state: c_n's slice, or scratch
};

int ks_rnn_cell(const KsRnn& s, const KsRnnStep& p, cudaStream_t stream) {
  const int64_t blocks = (s.state() + s.threads - 1) / s.threads;
  if (s.lstm) ks_lstm_cell<<<(unsigned)blocks, s.threads, 0, stream>>>(p, s.batch, s.hidden);
  else ks_gru_cell<<<(unsigned)blocks, s.threads, 0, stream>>>(p, s.batch, s.hidden);
  return (int)cudaGetLastError();
}

// The steps of one direction (backwards for the reverse one), each h written into `out` at this
// direction's columns; xg holds the input projection of every step.
int ks_rnn_steps(const KsRnn& s, KsRnnGemm gemm, int64_t dir, const float* const* w, const KsRnnState& state,
                 float* out, const float* xg, float* hg, cudaStream_t stream) {
  const int64_t H = s.hidden, GH = s.gates * H, DH = s.directions * H;
  const float* h_prev = state.h0;
  int64_t h_prev_ld = H;
  for (int64_t step = 0; step < s.seq; ++step) {
    const int64_t t = dir ? s.seq - 1 - step : step;
    int status = gemm((int)s.batch, (int)GH, (int)H, h_prev, (int)h_prev_ld, w[1], hg, 0.0f, stream);
    const KsRnnStep p{xg + s.row(t) * GH, s.batch_rows() * GH, hg, h_prev, h_prev_ld,
                      out + s.row(t) * DH + dir * H, s.batch_rows() * DH, state.c,
                      s.has_biases ? w[2] : nullptr, s.has_biases ? w[3] : nullptr};
    if (status == 0) status = ks_rnn_cell(s, p, stream);
    if (status != 0) return status;
    h_prev = p.h;
    h_prev_ld = p.h_ld;
  }
  if (state.h_n == nullptr) return 0;
  return (int)cudaMemcpy2DAsync(state.h_n, H * sizeof(float), h_prev, h_prev_ld * sizeof(float), H * sizeof(float),
                                s.batch, cudaMemcpyDeviceToDevice, stream);
}

// One direction of one layer: the input projection of all steps as one GEMM, the cell state from c0, the steps.
int ks_rnn_direction(const KsRnn& s, KsRnnGemm gemm, int64_t dir, const float* in, int64_t in_size,
                     const float* const* w, const KsRnnState& state, float* out, float* xg, float* hg,
                     cudaStream_t stream) {
  const int64_t GH = s.gates * s.hidden;
  int status = gemm((int)s.rows(), (int)GH, (int)in_size, in, (int)in_size, w[0], xg, 0.0f, stream);
  if (status == 0 && s.lstm)
    status = (int)cudaMemcpyAsync(state.c, state.c0, s.state() * sizeof(float), cudaMemcpyDeviceToDevice, stream);
  return status != 0 ? status : ks_rnn_steps(s, gemm, dir, w, state, out, xg, hg, stream);
}

// The whole stack. scratch: two layer sequences, the input projection, the recurrent product and two states
// (cuda/recurrent.py's _scratch counts them). x, h0, c0, out, h_n, c_n as torch lays them out; h0, c0, out,
// h_n and c_n may be nullptr (zero initial states; results nothing reads). weights: w_ih, w_hh(, b_ih, b_hh) per layer and direction.
int ks_rnn_run(const KsRnn& s, KsRnnGemm gemm, const float* x, const float* h0, const float* c0,
               const float* const* weights, float* out, float* h_n, float* c_n, float* scratch,
               cudaStream_t stream) {
  const int64_t DH = s.directions * s.hidden, GH = s.gates * s.hidden;
  float* sequences[2] = {scratch, scratch + s.rows() * DH};
  float* xg = sequences[1] + s.rows() * DH;
  float* hg = xg + s.rows() * GH;
  float* c_scratch = hg + s.batch * GH;
  float* zeros = c_scratch + s.state();
  int status = (int)cudaMemsetAsync(zeros, 0, s.state() * sizeof(float), stream);
  const float* in = x;
  int64_t in_size = s.input;
  for (int64_t layer = 0; layer < s.layers && status == 0; ++layer) {
    float* layer_out = layer == s.layers - 1 && out ? out : sequences[layer % 2];
    for (int64_t dir = 0; dir < s.directions && status == 0; ++dir) {
      const int64_t at = (layer * s.directions + dir) * s.state();
      const KsRnnState state{h0 ? h0 + at : zeros, c0 ? c0 + at : zeros, h_n ? h_n + at : nullptr,
                             c_n ? c_n + at : c_scratch};
      status = ks_rnn_direction(s, gemm, dir, in, in_size, weights + (layer * s.directions + dir) *
                                s.weights_per_layer(), state, layer_out, xg, hg, stream);
    }
    in = layer_out;
    in_size = DH;
  }
  return status;
}
