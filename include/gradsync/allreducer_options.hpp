// SPDX-License-Identifier: Apache-2.0
// How an allreducer is constructed: the options of its collectives, its progress thread,
// bucket cap, timeline, metrics and flight recorder (allreducer.hpp). A header of its own
// because the allreducer's shared part (allreducer/allreducer_core.hpp) takes them too.
#pragma once

#include <cstddef>
#include <string>

#include "gradsync/core/async.hpp"
#include "gradsync/core/call.hpp"
#include "gradsync/core/flight_recorder.hpp"
#include "gradsync/observe/metrics.hpp"
#include "gradsync/observe/timeline.hpp"

namespace gradsync {

/// Construction options of an allreducer.
struct allreducer_options {
  call_options call{};            ///< timeout and cross-rank checks of every collective
  bool background_thread = true;  ///< false: async work runs on the caller when launched
  /// Nice steps the background thread lowers its priority by, so the caller's compute
  /// thread gets its core back as soon as it wakes (docs/fusion.md, "Priority"); 0 keeps
  /// the caller's priority. Default 10, or GRADSYNC_PROGRESS_NICE (0..19) when set.
  int progress_nice = detail::progress_nice_from_env(10);
  std::string timeline = observe::timeline::env_path();  ///< Chrome-trace path; "" = off
  /// Bucket cap in bytes, chosen at run time: 0 keeps the fusion policy's Bytes; else it
  /// replaces them (first bucket min(1 MiB, it)), so one instantiation serves every
  /// size. Needs a fusing policy; part of the plan every rank must agree on.
  std::size_t bucket_bytes = 0;
  /// Directory for a Prometheus textfile of this rank (observe/metrics.hpp); "" = off.
  /// Default: GRADSYNC_METRICS.
  std::string metrics = observe::metrics_file::env_dir();
  /// The file's name, `<metrics_job>.rank<R>.prom`: give each allreducer of a process its own.
  std::string metrics_job = "gradsync";
  /// The job's id, in the file's name (`<metrics_job>.ID.rank<R>.prom`) and a job_id
  /// label, so that two jobs on one node do not write one file; "" = neither. Default:
  /// the launcher's (observe::metrics_file::env_job_id()).
  std::string metrics_job_id = observe::metrics_file::env_job_id();
  /// Where the flight recorder writes this rank's last calls when one fails
  /// (`<path>.rank<R>.json`, core/flight_recorder.hpp); "" = stderr. Default:
  /// GRADSYNC_FLIGHT_RECORDER.
  std::string flight_recorder = gradsync::flight_recorder::env_path();
  /// How many calls the flight recorder keeps.
  std::size_t flight_depth = 64;
};

}  // namespace gradsync
