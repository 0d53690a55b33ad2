// SPDX-License-Identifier: Apache-2.0
// One rank of bench/fault_suite: allreduces in a loop until the suite injects a fault
// (SIGKILL or SIGSTOP of a rank, a host's link taken down), then records what it saw in
// OUT/rank<R>.txt and ends the way the docs tell users to (docs/reliability.md):
//   shm        exit(3) after the transport is gone (the segment is unlinked at attach)
//   mpi        transport::abort_job, so the job ends even where the launcher cannot reach
//   two_level  a rank (across simulated hosts)
// Lines written: "started pid=<pid> host=<host>" once a few calls went through on every
// rank, then "error code=<errc> t=<unix time> what=<message>". For the stall trials
// (GS_FAULT_DELAY, GS_FAULT_CALLS: see fault_plan) the delayed rank writes
// "delayed call=<n>" and every rank ends normally after the planned calls.
// An MPI rank waits `linger` seconds after its error before abort_job, so that every
// rank records its own error before the launcher, told by the first abort, kills them
// (the suite checks each survivor's; 1 s when not given). A rank whose process exits
// without either (inside the MPI library, say) writes "exited during the loop" from an
// atexit handler, and one killed by a catchable signal left at its default action
// (SIGPIPE, SIGTERM, ...) writes "died of signal N" first, so that a failed trial tells
// how a rank that recorded no error ended.
//   fault_worker shm|mpi|two_level OUT_DIR [elements] [seconds_between_calls] [linger]
#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <csignal>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <gradsync/algo/auto_select.hpp>
#include <gradsync/algo/hierarchical.hpp>
#include <gradsync/allreduce.hpp>
#include <gradsync/transport/mpi.hpp>
#include <gradsync/transport/mpi/exit.hpp>
#include <gradsync/transport/shm.hpp>
#include <gradsync/transport/two_level/from_mpi.hpp>

namespace gs = gradsync;

namespace {

double unix_now() {  // wall clock: the suite compares it with when it injected the fault
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct recorder {
  std::string file;
  /// The recorder of this process's loop while it runs, for on_exit (null otherwise).
  static const recorder*& active() {
    static const recorder* r = nullptr;
    return r;
  }
  static void on_exit() {
    if (const recorder* r = active())
      r->line("exited during the loop (exit() without a gradsync error)");
  }
  void line(const std::string& s) const { std::ofstream(file, std::ios::app) << s << "\n"; }
  void error(const gs::error& e, std::size_t calls) const {
    char when[64];
    std::snprintf(when, sizeof when, "%.3f", unix_now());
    line(std::string("error code=") + std::string(gs::errc_name(e.code())) +
         " calls=" + std::to_string(calls) + " t=" + when + " what=" + e.what());
  }
};

// "died of signal N" into the record (opened before, as `fd`) from a handler of every
// catchable signal whose action is the default, then that default: the process still dies
// of it, and a trial's files say which signal it was.
struct signal_note {
  static int& fd() {
    static int f = -1;
    return f;
  }
  static void handler(int sig) {
    char msg[] = "died of signal 00\n";
    msg[15] = static_cast<char>('0' + sig / 10 % 10);
    msg[16] = static_cast<char>('0' + sig % 10);
    if (fd() >= 0 && ::write(fd(), msg, sizeof msg - 1) < 0) {
      // nothing more a signal handler can do about it
    }
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
  static void install(const std::string& file) {
    fd() = ::open(file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    for (int sig : {SIGPIPE, SIGTERM, SIGHUP, SIGINT, SIGUSR1, SIGUSR2, SIGALRM}) {
      struct sigaction now {};
      if (sigaction(sig, nullptr, &now) == 0 && now.sa_handler == SIG_DFL) {
        struct sigaction act {};
        act.sa_handler = handler;
        sigaction(sig, &act, nullptr);
      }
    }
  }
};

// Faults planned from the environment: GS_FAULT_DELAY="rank:call:seconds" makes that
// rank sleep (outside gradsync) before that call (the stall trials);
// GS_FAULT_NAN="rank:call:index" puts a NaN at that index of that rank's input before
// that call (the NaN trials, with GRADSYNC_CHECK_FINITE=1); GS_FAULT_CALLS=N ends the
// loop after N calls.
struct fault_plan {
  static constexpr std::size_t none = ~std::size_t{0};
  std::size_t delay_rank = none, delay_call = 0, nan_rank = none, nan_call = 0, nan_index = 0;
  std::size_t calls = none;
  double seconds = 0;
  static fault_plan from_env() {
    fault_plan p;
    unsigned long r = 0, c = 0, i = 0;
    double s = 0;
    if (const char* d = std::getenv("GS_FAULT_DELAY");
        d && std::sscanf(d, "%lu:%lu:%lf", &r, &c, &s) == 3) {
      p.delay_rank = r;
      p.delay_call = c;
      p.seconds = s;
    }
    if (const char* d = std::getenv("GS_FAULT_NAN");
        d && std::sscanf(d, "%lu:%lu:%lu", &r, &c, &i) == 3) {
      p.nan_rank = r;
      p.nan_call = c;
      p.nan_index = i;
    }
    if (const char* n = std::getenv("GS_FAULT_CALLS")) p.calls = std::stoul(n);
    return p;
  }
};

// Allreduces until an error (or the planned number of calls); returns the calls made.
template <class Run>
std::size_t loop(const recorder& rec, double pause, std::size_t rank, std::span<float> data,
                 Run&& run) {
  const fault_plan plan = fault_plan::from_env();
  recorder::active() = &rec;
  std::atexit(recorder::on_exit);
  signal_note::install(rec.file);
  std::size_t calls = 0;
  for (;; ++calls) {
    if (calls == plan.calls) {
      recorder::active() = nullptr;
      return calls;
    }
    if (rank == plan.delay_rank && calls == plan.delay_call) {
      rec.line("delayed call=" + std::to_string(calls));
      std::this_thread::sleep_for(std::chrono::duration<double>(plan.seconds));
    }
    if (rank == plan.nan_rank && calls == plan.nan_call && plan.nan_index < data.size()) {
      data[plan.nan_index] = std::numeric_limits<float>::quiet_NaN();
    }
    run();
    if (calls == 3) {
      const char* host = std::getenv("GS_NETNS");
      rec.line("started pid=" + std::to_string(::getpid()) + " host=" + (host ? host : "local"));
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(pause));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: fault_worker shm|mpi|two_level OUT_DIR [elements] [pause_s] [linger_s]\n");
    return 2;
  }
  const std::string kind = argv[1];
  const std::string out = argv[2];
  const std::size_t elements = argc > 3 ? std::stoul(argv[3]) : std::size_t{1} << 18;
  const double pause = argc > 4 ? std::atof(argv[4]) : 0.01;
  const double linger = argc > 5 ? std::atof(argv[5]) : 1.0;
  std::vector<float> v(elements, 1.0f);
  const std::span<float> s(v);
  std::size_t calls = 0;
  if (kind == "shm") {
    const std::size_t rank = gs::transport::shm_launch_from_env().rank;
    recorder rec{out + "/rank" + std::to_string(rank) + ".txt"};
    try {
      auto t = gs::transport::shm::from_env();
      loop(rec, pause, rank, s, [&] {
        gs::allreduce<gs::algo::auto_select>(t, s, gs::op::avg);
        ++calls;
      });
      return 0;
    } catch (const gs::error& e) {
      recorder::active() = nullptr;
      rec.error(e, calls);
      std::fprintf(stderr, "fault_worker: %s\n", e.what());
      return 3;
    }
  }
  if (kind != "mpi" && kind != "two_level") {
    std::fprintf(stderr, "fault_worker: unknown transport '%s' (shm, mpi, two_level)\n",
                 kind.c_str());
    return 2;
  }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world);
  const recorder rec{out + "/rank" + std::to_string(world) + ".txt"};
  try {
    if (kind == "mpi") {
      gs::transport::mpi t{MPI_COMM_WORLD};
      loop(rec, pause, static_cast<std::size_t>(world), s, [&] {
        gs::allreduce<gs::algo::auto_select>(t, s, gs::op::avg);
        ++calls;
      });
    } else {
      auto t = gs::transport::two_level_from_mpi(MPI_COMM_WORLD);
      loop(rec, pause, static_cast<std::size_t>(world), s, [&] {
        gs::allreduce<gs::algo::hierarchical<>>(t, s, gs::op::avg);
        ++calls;
      });
    }
    return gs::transport::finalize_job(0);
  } catch (const gs::error& e) {
    recorder::active() = nullptr;
    rec.error(e, calls);
    std::fprintf(stderr, "fault_worker: rank %d: %s\n", world, e.what());
    std::this_thread::sleep_for(std::chrono::duration<double>(linger));
    gs::transport::abort_job(MPI_COMM_WORLD, 3, std::chrono::seconds(5));
  }
}
