#ifndef KS_RNN_DEFINED
#define KS_RNN_DEFINED
#include <algorithm>
// Recurrent layers (nn.LSTM, nn.GRU), run by a recurrent group's kernel (cpu/recurrent.py): per layer and
// direction, the input projection of every step as one GEMM, then per step the recurrent GEMM and the cell.

// A layer stack's sizes. Row (t, b) of x, of the input projection and of an output sequence is
// t * batch + b, or b * seq + t when batch_first.
struct KsRnn {
  int64_t seq, batch, input, hidden, layers, directions, gates;
  bool batch_first, lstm, has_biases, threaded;
  int64_t row(int64_t t) const { return batch_first ? t : t * batch; }  // the row of (t, 0)
  int64_t batch_rows() const { return batch_first ? seq : 1; }           // rows from (t, b) to (t, b + 1)
  int64_t rows() const { return seq * batch; }
  int64_t state() const { return batch * hidden; }                       // one [batch, hidden] state
  int64_t weights_per_layer() const { return has_biases ? 4 : 2; }
};

// Work below which a loop stays on one thread: a step's recurrent GEMM (level3/36: 10 x 1024 x 256) and cell
// are too small to pay for waking a team 3072 times; the input projection of all steps is not.
constexpr int64_t kKsRnnThreadedWork = 1LL << 22;

// c[r, j] = a[r, :] . w[j, :] for r < m, j < n: a's rows lda apart, w [n, k] row-major, c [m, n] dense (x @ W^T).
static void ks_rnn_gemm(const KsRnn& s, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                        const float* w, float* c) {
#pragma omp parallel for collapse(2) schedule(static) if (s.threaded && m * n * k >= kKsRnnThreadedWork)
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      const float* ar = a + r * lda;
      const float* wj = w + j * k;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t q = 0; q < k; ++q) dot += ar[q] * wj[q];
      c[r * n + j] = dot;
    }
  }
}

// One step of one direction: where its rows lie.
struct KsRnnStep {
  const float* xg; int64_t xg_ld;          // the input projection of batch row b at xg + b * xg_ld (no bias)
  const float* hg;                         // h_prev @ W_hh^T, [batch, gates * hidden] (no bias)
  const float* h_prev; int64_t h_prev_ld;  // the previous h (h0 at the first step)
  float* h; int64_t h_ld;                  // the step's h, in the layer's output sequence
  float* c;                                // LSTM's cell state [batch, hidden], updated in place
  const float* b_ih; const float* b_hh;    // nullptr without biases
};

static inline float ks_rnn_sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }
static inline float ks_rnn_bias(const float* b, int64_t i) { return b ? b[i] : 0.0f; }

// A gate's input before its activation: projection + recurrent product + both biases.
static inline float ks_rnn_gate(const KsRnnStep& p, const float* x, const float* hg, int64_t i) {
  return x[i] + hg[i] + ks_rnn_bias(p.b_ih, i) + ks_rnn_bias(p.b_hh, i);
}

// torch's LSTM cell, gates i, f, g, o: c = f * c + i * g, h = o * tanh(c).
static void ks_lstm_cell(const KsRnn& s, const KsRnnStep& p) {
  const int64_t H = s.hidden;
#pragma omp parallel for schedule(static) if (s.threaded && s.state() * 64 >= kKsRnnThreadedWork)
  for (int64_t b = 0; b < s.batch; ++b) {
    const float* x = p.xg + b * p.xg_ld;
    const float* hg = p.hg + b * 4 * H;
    for (int64_t j = 0; j < H; ++j) {
      const float i = ks_rnn_sigmoid(ks_rnn_gate(p, x, hg, j));
      const float f = ks_rnn_sigmoid(ks_rnn_gate(p, x, hg, H + j));
      const float g = std::tanh(ks_rnn_gate(p, x, hg, 2 * H + j));
      const float o = ks_rnn_sigmoid(ks_rnn_gate(p, x, hg, 3 * H + j));
      float& c = p.c[b * H + j];
      c = f * c + i * g;
      p.h[b * p.h_ld + j] = o * std::tanh(c);
    }
  }
}

// torch's GRU cell, gates r, z, n: n = tanh(x_n + b_in + r * (h_n + b_hn)), h = (1 - z) * n + z * h_prev.
static void ks_gru_cell(const KsRnn& s, const KsRnnStep& p) {
  const int64_t H = s.hidden;
#pragma omp parallel for schedule(static) if (s.threaded && s.state() * 64 >= kKsRnnThreadedWork)
  for (int64_t b = 0; b < s.batch; ++b) {
    const float* x = p.xg + b * p.xg_ld;
    const float* hg = p.hg + b * 3 * H;
    for (int64_t j = 0; j < H; ++j) {
      const float r = ks_rnn_sigmoid(ks_rnn_gate(p, x, hg, j));
      const float z = ks_rnn_sigmoid(ks_rnn_gate(p, x, hg, H + j));
      const int64_t k = 2 * H + j;
      const float n = std::tanh(x[k] + ks_rnn_bias(p.b_ih, k) + r * (hg[k] + ks_rnn_bias(p.b_hh, k)));
      p.h[b * p.h_ld + j] = (1.0f - z) * n + z * p.h_prev[b * p.h_prev_ld + j];
    }
  }
}

// Where one layer and direction starts and ends its states (slices of h0, c0, h_n, c_n, or scratch).
struct KsRnnState {
  const float* h0; const float* c0;
  float* h_n;  // nullptr when nothing reads it
  float* c;    // LSTM's running cell state: c_n's slice, or scratch
};

// One direction of one layer: the input projection of all steps, then the steps in order (backwards for
// the reverse direction), each h written into `out` at this direction's columns.
static void ks_rnn_direction(const KsRnn& s, int64_t dir, const float* in, int64_t in_size, const float* const* w,
                             const KsRnnState& state, float* out, float* xg, float* hg) {
  const int64_t H = s.hidden, GH = s.gates * H, DH = s.directions * H;
  ks_rnn_gemm(s, s.rows(), GH, in_size, in, in_size, w[0], xg);
  if (s.lstm) std::copy(state.c0, state.c0 + s.state(), state.c);
  const float* b_ih = s.has_biases ? w[2] : nullptr;
  const float* b_hh = s.has_biases ? w[3] : nullptr;
  const float* h_prev = state.h0;
  int64_t h_prev_ld = H;
  for (int64_t step = 0; step < s.seq; ++step) {
    const int64_t t = dir ? s.seq - 1 - step : step;
    ks_rnn_gemm(s, s.batch, GH, H, h_prev, h_prev_ld, w[1], hg);
    const KsRnnStep p{xg + s.row(t) * GH, s.batch_rows() * GH, hg, h_prev, h_prev_ld,
                      out + s.row(t) * DH + dir * H, s.batch_rows() * DH, state.c, b_ih, b_hh};
    if (s.lstm) ks_lstm_cell(s, p); else ks_gru_cell(s, p);
    h_prev = p.h;
    h_prev_ld = p.h_ld;
  }
  for (int64_t b = 0; state.h_n && b < s.batch; ++b)
    std::copy(h_prev + b * h_prev_ld, h_prev + b * h_prev_ld + H, state.h_n + b * H);
}

// The whole stack. x, h0, c0, out, h_n, c_n as torch lays them out; h0, c0, out, h_n and c_n may be nullptr
// (zero initial states; results nothing reads). weights: w_ih, w_hh(, b_ih, b_hh) per layer and direction.
static void ks_rnn_run(const KsRnn& s, const float* x, const float* h0, const float* c0,
                       const float* const* weights, float* out, float* h_n, float* c_n) {
  const int64_t DH = s.directions * s.hidden, GH = s.gates * s.hidden;
  std::vector<float> scratch(2 * s.rows() * DH + s.rows() * GH + s.batch * GH + 2 * s.state(), 0.0f);
  float* sequences[2] = {scratch.data(), scratch.data() + s.rows() * DH};
  float* xg = sequences[1] + s.rows() * DH;
  float* hg = xg + s.rows() * GH;
  float* c_scratch = hg + s.batch * GH;
  const float* zeros = c_scratch + s.state();
  const float* in = x;
  int64_t in_size = s.input;
  for (int64_t layer = 0; layer < s.layers; ++layer) {
    float* layer_out = layer == s.layers - 1 && out ? out : sequences[layer % 2];
    for (int64_t dir = 0; dir < s.directions; ++dir) {
      const int64_t at = (layer * s.directions + dir) * s.state();
      const KsRnnState state{h0 ? h0 + at : zeros, c0 ? c0 + at : zeros, h_n ? h_n + at : nullptr,
                             c_n ? c_n + at : c_scratch};
      ks_rnn_direction(s, dir, in, in_size, weights + (layer * s.directions + dir) * s.weights_per_layer(), state,
                       layer_out, xg, hg);
    }
    in = layer_out;
    in_size = DH;
  }
}
#endif
