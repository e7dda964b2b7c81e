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
#include <tuple>
#include <utility>
#include <vector>

#include "binding_registry.h"

namespace {

std::mutex g_lock;
std::map<std::string, int64_t> g_ops;  // op name -> calls while armed
std::optional<at::CallbackHandle> g_handle;
int64_t g_arms = 0;                    // arm() calls: the harness compares them with its own
thread_local bool t_sentinel = false;  // the next op on this thread is the harness's own check
thread_local bool t_sentinel_seen = false;

std::unique_ptr<at::ObserverContext> on_op(const at::RecordFunction& fn) {
  if (t_sentinel) {
    t_sentinel = false;
    t_sentinel_seen = true;
    return nullptr;
  }
  std::lock_guard<std::mutex> guard(g_lock);
  ++g_ops[fn.name()];
  return nullptr;
}

// Runs one op of the harness's own on this thread, unrecorded; true when the callback saw it.
bool check_op() {
  t_sentinel_seen = false;
  t_sentinel = true;
  { auto probe = at::empty({0}); }
  t_sentinel = false;
  return t_sentinel_seen;
}

}  // namespace

// Installs the callback; returns how many times arm() has been called in this process. The
// first op after a change of callbacks rebuilds this thread's callback list: one op here pays
// for that, outside the timed interval, so the candidate's first op does not.
int64_t ks_watch_arm() {
  int64_t arms = 0;
  {
    std::lock_guard<std::mutex> guard(g_lock);
    arms = ++g_arms;
    if (!g_handle) {
      g_handle = at::addGlobalCallback(
          at::RecordFunctionCallback(&on_op).needsInputs(false).scopes({at::RecordScope::FUNCTION}));
    }
  }
  check_op();
  return arms;
}

// Removes the callback and hands over what it saw: (ops seen since arm, whether the check op on
// this thread went unseen (RecordFunction turned off or its callbacks cleared), arm() calls so
// far, whether it was armed at all (someone else may have disarmed it)).
std::tuple<std::vector<std::pair<std::string, int64_t>>, bool, int64_t, bool> ks_watch_disarm() {
  const bool was_armed = g_handle.has_value();
  bool blind = false;
  if (was_armed) {
    blind = !check_op();
    at::removeCallback(*g_handle);
    g_handle.reset();
  }
  std::lock_guard<std::mutex> guard(g_lock);
  std::vector<std::pair<std::string, int64_t>> ops(g_ops.begin(), g_ops.end());
  g_ops.clear();
  return {ops, blind, g_arms, was_armed};
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
