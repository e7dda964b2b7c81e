// kernelsmith's native op watch (harness infrastructure, not a kernel).
//
// Counts the dispatcher ops that run while it is armed, through a global RecordFunction
// callback: every aten op, called from Python or from C++, passes through it. It costs well
// under a microsecond per op and runs no Python, so the profiler can watch the candidate's
// timed runs without charging it the 10-90 us per op of a Python dispatch mode (which eager,
// timed unwatched, never pays). The callback is installed only while armed, outside the
// timed interval, so eager's runs pay nothing either.
#include <torch/extension.h>
#include <ATen/record_function.h>
#include <c10/util/Logging.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "binding_registry.h"

namespace {

std::mutex g_lock;
std::map<std::string, int64_t> g_ops;  // op name -> calls while armed
std::optional<at::CallbackHandle> g_handle;
std::atomic<bool> g_sentinel{false};   // the next op is the harness's own check
std::atomic<bool> g_sentinel_seen{false};
int64_t g_blind = 0;                   // disarms whose check op went unseen

std::unique_ptr<at::ObserverContext> on_op(const at::RecordFunction& fn) {
  if (g_sentinel.exchange(false)) {
    g_sentinel_seen.store(true);
    return nullptr;
  }
  std::lock_guard<std::mutex> guard(g_lock);
  ++g_ops[fn.name()];
  return nullptr;
}

}  // namespace

void ks_watch_arm() {
  if (g_handle) return;
  g_handle = at::addGlobalCallback(
      at::RecordFunctionCallback(&on_op).needsInputs(false).scopes({at::RecordScope::FUNCTION}));
}

// Proves the watch still sees ops on this thread (a candidate may have cleared the callbacks
// or turned RecordFunction off), then removes the callback.
void ks_watch_disarm() {
  if (!g_handle) return;
  g_sentinel_seen.store(false);
  g_sentinel.store(true);
  { auto probe = at::empty({0}); }
  g_sentinel.store(false);
  if (!g_sentinel_seen.load()) ++g_blind;
  at::removeCallback(*g_handle);
  g_handle.reset();
}

// The ops seen since the last call, and how many disarms found the watch blind; both reset.
std::pair<std::vector<std::pair<std::string, int64_t>>, int64_t> ks_watch_take() {
  std::lock_guard<std::mutex> guard(g_lock);
  std::vector<std::pair<std::string, int64_t>> ops(g_ops.begin(), g_ops.end());
  g_ops.clear();
  const int64_t blind = g_blind;
  g_blind = 0;
  return {ops, blind};
}

// A c10::Error walks the whole native stack for its backtrace when it is made. Where the
// unwinder cannot read some library's unwind tables, that walk crashes (pytorch#117645), and a
// failing TORCH_CHECK in a kernel's binding ends the process instead of raising its message
// (seen on the H200 machine, bench/probes/throw_probe.py). A worker wants the message only.
void ks_quiet_backtraces() {
  c10::SetStackTraceFetcher([]() -> std::string { return ""; });
}

REGISTER_BINDING(quiet_backtraces, ks_quiet_backtraces);
REGISTER_BINDING(arm, ks_watch_arm);
REGISTER_BINDING(disarm, ks_watch_disarm);
REGISTER_BINDING(take, ks_watch_take);
