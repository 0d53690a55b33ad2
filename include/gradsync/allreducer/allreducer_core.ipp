// SPDX-License-Identifier: Apache-2.0
// allreducer_core's functions (allreducer_core.hpp declares them): inline in a
// header-only build, compiled once by <gradsync/src.hpp> under
// GRADSYNC_SEPARATE_COMPILATION (config.hpp).
#pragma once

#include <algorithm>
#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <utility>

#include "gradsync/allreducer/allreducer_core.hpp"

namespace gradsync::detail {

GRADSYNC_DECL std::vector<std::string> bucket_labels(const fusion::plan& p,
                                                     function_ref<std::string(std::size_t)> label) {
  std::vector<std::string> out;
  for (std::size_t k = 0; k < p.buckets.size(); ++k) {
    const auto& ts = p.buckets[k].tensors;
    std::string l = "bucket " + std::to_string(k) + " of " + std::to_string(p.buckets.size()) + ":";
    for (std::size_t j = 0; j < ts.size() && j < 3; ++j)
      l += (j ? ", #" : " #") + std::to_string(ts[j]) + label(ts[j]);
    if (ts.size() > 3) l += ", ... (" + std::to_string(ts.size()) + " tensors)";
    out.push_back(std::move(l));
  }
  return out;
}

GRADSYNC_DECL allreducer_core::~allreducer_core() {
  bg_.stop();
  if (step_ && gate_.next() < reg_.plan().buckets.size()) {
    auto e = std::make_exception_ptr(
        error(errc::invalid_argument, site(),
              "the allreducer was destroyed before every tensor of the step was marked ready"));
    for (std::size_t b = gate_.next(); b < reg_.plan().buckets.size(); ++b)
      step_->done->finish_one(e);
  }
  if (tl_.enabled() && !tl_.write()) {
    log(log_level::warn, rank_, "cannot write timeline %s", tl_.path().c_str());
  }
  ledger_.publish();
}

GRADSYNC_DECL pending allreducer_core::run_list(std::span<const tensor_ref> list, bool async,
                                                const step_table& table) {
  ledger_.throw_if_broken();
  if (!async || !bg_.enabled()) bg_.drain();
  auto b = make_list_batch(list, table);
  const observe::track tr =
      async && bg_.enabled() ? observe::track::progress : observe::track::caller;
  for (std::size_t k = 0; k < b->plan->buckets.size(); ++k) post(b, k, tr, async);
  if (b->plan->buckets.empty()) ledger_.fold(std::move(b->stats));
  return pending(b->done);
}

GRADSYNC_DECL void allreducer_core::refuse_unlisted(std::size_t i, const step_table& table,
                                                    reduce_op op, bool (*listed)(dtype)) const {
  const dtype d = reg_.desc(i).type;
  if (!table[static_cast<std::size_t>(d)]) {
    throw error(errc::invalid_argument, site(),
                "tensor #" + std::to_string(i) + reg_.label(i) + " is " +
                    std::string(dtype_name(d)) + bucket_runner_base::refusal(d, op, listed(d)));
  }
}

GRADSYNC_DECL void allreducer_core::committed(const step_table& table, reduce_op op) {
  plan_chosen_ = runner_->choices(reg_.plan());  // the same for every step of this plan
  bucket_labels_ = detail::bucket_labels(reg_.plan(), [&](std::size_t i) { return reg_.label(i); });
  codec_state_.assign(reg_.plan().buckets.size(), nullptr);  // a new plan starts codecs afresh
  step_steps_ = table;
  step_op_ = op;
  plan_name_ = plan_name(reg_.plan().digest);  // the flight recorder keeps a view of it
}

GRADSYNC_DECL void allreducer_core::ready(std::size_t i) {
  reg_.check_index(i);
  start_step_if_needed();
  if (!gate_.mark(i)) {
    throw error(errc::invalid_argument, site(),
                "tensor #" + std::to_string(i) + reg_.label(i) +
                    " was marked ready twice in one step; call wait() to end the step first");
  }
  launch_ready_buckets();
}

GRADSYNC_DECL pending allreducer_core::allreduce_async() {
  reg_.require_committed();
  start_step_if_needed();
  launch_rest();
  phase_ = step_phase::closed;
  return pending(step_->done);
}

GRADSYNC_DECL void allreducer_core::wait() {
  reg_.require_committed();
  const auto t0 = steady::now();
  if (phase_ == step_phase::closed && step_->done->waited()) phase_ = step_phase::idle;
  if (phase_ != step_phase::closed) {  // idle: a whole step with every tensor ready
    start_step_if_needed();
    launch_rest();
  }
  phase_ = step_phase::idle;
  pending(step_->done).wait();
  tl_.complete("wait", observe::track::caller, t0, steady::now());
}

GRADSYNC_DECL void allreducer_core::reset_compression_state() {
  if (phase_ == step_phase::closed && step_->done->waited()) phase_ = step_phase::idle;
  if (phase_ != step_phase::idle) {
    throw error(errc::invalid_argument, site(),
                "reset_compression_state() while a step is open: its buckets use the state; "
                "call wait() first");
  }
  codec_state_.assign(codec_state_.size(), nullptr);  // made afresh on first use
}

GRADSYNC_DECL std::string allreducer_core::summary() const {
  const auto s = ledger_.snapshot();
  return observe::summary_line(rank_, s.first, s.second);
}

GRADSYNC_DECL allreducer_core::allreducer_core(std::size_t rank, std::size_t size,
                                               const allreducer_options& o, composition_names names,
                                               fusion::policy_values fusion,
                                               allreducer_shared& shared,
                                               bucket_runner_base& runner)
    : rank_(rank),
      size_(size),
      names_(names),
      opt_(shared.options),
      tl_(shared.timeline),
      ledger_(rank, size, o.metrics, o.metrics_job, o.metrics_job_id,
              "transport=\"" + std::string(names.transport) + "\",algorithm=\"" +
                  std::string(names.algorithm) + "\",fusion=\"" + std::string(names.fusion) +
                  "\",compression=\"" + std::string(names.compression) + "\""),
      reg_(rank, fusion, o.bucket_bytes, names.compression),
      pool_(shared.pool),
      runner_(&runner),
      stall_(stall_threshold(opt_.resolved_timeout())),
      bg_(o.background_thread, o.progress_nice) {
  log(log_level::info, rank,
      "allreducer: transport=%s algorithm=%s fusion=%s (bucket %zu B, first %zu B) "
      "compression=%s ranks=%zu progress=%s timeline=%s",
      std::string(names.transport).c_str(), std::string(names.algorithm).c_str(),
      std::string(names.fusion).c_str(), reg_.bucket_bytes(), reg_.first_bucket_bytes(),
      std::string(names.compression).c_str(), size, o.background_thread ? "thread" : "inline",
      tl_.enabled() ? tl_.path().c_str() : "off");
}

GRADSYNC_DECL std::shared_ptr<batch> allreducer_core::make_list_batch(
    std::span<const tensor_ref> list, const step_table& table) {
  auto b = std::make_shared<batch>();
  std::vector<fusion::tensor_desc> descs(list.size());
  b->own_ptrs.resize(list.size());
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (!list[i].data && list[i].count) {
      throw error(errc::invalid_argument, site(),
                  "tensor #" + std::to_string(i) + " of the list has a null pointer");
    }
    if (!table[static_cast<std::size_t>(list[i].type)]) {
      throw error(errc::invalid_argument, site(),
                  "tensor #" + std::to_string(i) + " of the list is " +
                      std::string(dtype_name(list[i].type)) +
                      (list[i].type == dtype::i8
                           ? bucket_runner_base::int8_refusal()
                           : ", which the op cannot take (op::avg needs a floating-point type)"));
    }
    descs[i] = {list[i].count, list[i].type, {}};
    b->own_ptrs[i] = list[i].data;
  }
  // Grouped calls keep the caller's order: there is no backward pass to follow.
  b->own_plan = fusion::make_plan(descs, reg_.bucket_bytes(), reg_.first_bucket_bytes(),
                                  fusion::order::registration);
  if (runner_->reads_tensors()) b->own_parts = bucket_parts(b->own_plan, descs);
  b->plan = &b->own_plan;
  b->ptrs = &b->own_ptrs;
  if (std::any_of(b->own_plan.buckets.begin(), b->own_plan.buckets.end(),
                  [](const auto& k) { return k.tensors.size() > 1; })) {
    b->staging = pool_.acquire(b->own_plan.layout_bytes);
    b->layout = b->staging->data();
  }
  b->steps = table;
  init_batch(*b, runner_->choices(b->own_plan));
  return b;
}

GRADSYNC_DECL std::shared_ptr<batch> allreducer_core::make_step_batch() {
  auto b = std::make_shared<batch>();
  b->plan = &reg_.plan();
  b->ptrs = &reg_.ptrs();
  b->layout = reg_.layout();
  b->packed = !reg_.zero_copy();
  b->registered = true;
  b->step = steps_++;
  b->steps = step_steps_;
  init_batch(*b, plan_chosen_);
  return b;
}

GRADSYNC_DECL void allreducer_core::init_batch(batch& b, const std::string& chosen) {
  const std::size_t nb = b.plan->buckets.size();
  b.done = std::make_shared<detail::completion>(nb);
  b.jobs_left = nb;
  b.stats.ranks = size_;
  b.stats.algorithm = names_.algorithm;
  b.stats.chosen = chosen;
  b.stats.fusion = names_.fusion;
  b.stats.compression = names_.compression;
  b.stats.buckets = nb;
  b.stats.tensors = b.plan->tensor_bucket.size();
  b.stats.bytes_in = b.plan->payload_bytes;
  b.stats.per_bucket.assign(nb, {});
}

GRADSYNC_DECL void allreducer_core::post(const std::shared_ptr<batch>& b, std::size_t k,
                                         observe::track tr, bool async) {
  if (!async) {
    const auto now = steady::now();
    run_bucket(*b, k, {now, now}, tr);
    return;
  }
  bg_.post({[this, b, k, tr](const job_times& jt) { run_bucket(*b, k, jt, tr); },
            [b](const std::exception_ptr& e) { b->done->finish_one(e); }});
}

GRADSYNC_DECL void allreducer_core::run_bucket(batch& b, std::size_t k, const job_times& jt,
                                               observe::track tr) {
  std::exception_ptr err;
  if (!b.done->failed()) {
    try {
      ledger_.throw_if_broken();
      const auto start = std::max(jt.idle_since, b.created);
      if (start < jt.picked) {
        runner_->event("wait_gradients", tr, start, jt.picked,
                       [&] { return "\"bucket\":" + std::to_string(k); });
      }
      bucket_body(b, k, tr);
    } catch (...) {
      err = std::current_exception();
      ledger_.note_failure(err, k);
    }
  }
  if (--b.jobs_left == 0) {
    if (b.staging) pool_.release(std::move(b.staging));
    if (!err && !b.done->failed()) ledger_.fold(std::move(b.stats));
  }
  b.done->finish_one(err);
}

GRADSYNC_DECL void allreducer_core::bucket_body(batch& b, std::size_t k, observe::track tr) {
  const auto& bk = b.plan->buckets[k];
  auto copy = [&](const char* name, auto&& f) {
    const auto c0 = steady::now();
    f();
    const auto c1 = steady::now();
    runner_->event(name, tr, c0, c1, [&] { return "\"bucket\":" + std::to_string(k); });
    b.stats.pack_seconds += std::chrono::duration<double>(c1 - c0).count();
  };
  if (b.registered) {
    runner_->set_label(bucket_labels_[k]);
  } else {
    list_label_.assign("bucket ");  // reuses the string's room: no allocation per call
    list_label_ += std::to_string(k);
    list_label_ += " of a grouped call";
    runner_->set_label(list_label_);
  }
  // A step's buckets launch in plan order on every rank: one agreement as it starts
  // covers them all (grouped calls agree per bucket).
  steady::duration agreeing{};  // counts as the bucket's collective (time, stalls)
  if (b.registered && k == 0) {
    const auto a0 = steady::now();
    runner_->agree_step(b.step, plan_name_, step_op_, opt_.check_finite);
    const auto a1 = steady::now();
    agreeing = a1 - a0;
    runner_->event("agree_step", tr, a0, a1, [&] { return "\"step\":" + std::to_string(b.step); });
  }
  runner_->set_header_check(!b.registered);
  if (opt_.check_finite && is_floating_dtype(bk.type)) {
    check_finite(b, k, copy);
  } else if (b.copies(k)) {
    copy("pack", [&] { b.pack(k); });
  }
  const auto t0 = steady::now();
  const std::size_t wire0 = b.stats.bytes_wire, encoded0 = b.stats.bytes_encoded;
  runner_->run(b.steps, bk.type, b.bucket_data(k), bk.count,
               b.registered ? &codec_state_[k] : nullptr,
               b.registered          ? reg_.parts(k)
               : b.own_parts.empty() ? std::span<const compress::tensor_part>()
                                     : std::span<const compress::tensor_part>(b.own_parts[k]),
               tr, b.stats);
  const auto t1 = steady::now();
  b.stats.seconds += std::chrono::duration<double>(t1 - t0 + agreeing).count();
  if (t1 - t0 + agreeing > stall_) ++b.stats.stalls;
  b.stats.per_bucket[k] = {bk.bytes(), b.stats.bytes_encoded - encoded0,
                           b.stats.bytes_wire - wire0};
  runner_->event("allreduce", tr, t0, t1, [&] {
    return "\"bucket\":" + std::to_string(k) + ",\"bytes\":" + std::to_string(bk.bytes()) +
           ",\"tensors\":" + std::to_string(bk.tensors.size()) + ",\"algorithm\":\"" +
           std::string(names_.algorithm) + "\"";
  });
  if (b.copies(k)) copy("unpack", [&] { b.unpack(k); });
}

template <class Copy>
void allreducer_core::check_finite(batch& b, std::size_t k, Copy& copy) {
  batch::non_finite found;
  copy(b.copies(k) ? "pack" : "check_finite", [&] { found = b.pack_checked(k); });
  finite_finding mine;
  visit_dtype(b.plan->buckets[k].type, [&](auto tv) {
    using T = decltype(tv);
    mine = detail::make_finding(found.tensor, found.index, static_cast<const T*>(found.value),
                                rank_, runner_->describe_self());
  });
  // A peer's finding indexes this rank's names: it must be one of the plan's tensors.
  runner_->share_finding(mine, b.plan->tensor_bucket.size(), [&](std::size_t i) {
    return "tensor #" + std::to_string(i) +
           (b.registered ? reg_.label(i) : std::string(" of the list"));
  });
}

GRADSYNC_DECL void allreducer_core::start_step_if_needed() {
  if (phase_ == step_phase::open) return;  // the current step is still being filled
  ledger_.throw_if_broken();
  if (step_ && !step_->done->done()) {
    throw error(errc::invalid_argument, site(),
                "the previous step is still in flight; call wait() (or wait on its handle) "
                "before marking gradients of the next step");
  }
  step_ = make_step_batch();
  gate_.open(reg_.plan());
  phase_ = step_phase::open;
  if (reg_.plan().buckets.empty()) ledger_.fold(std::move(step_->stats));
}

GRADSYNC_DECL void allreducer_core::launch_rest() {
  gate_.mark_rest();
  launch_ready_buckets();
}

GRADSYNC_DECL void allreducer_core::launch_ready_buckets() {
  const observe::track tr = bg_.enabled() ? observe::track::progress : observe::track::caller;
  for (std::size_t k = gate_.take_next(); k != step_gate::none; k = gate_.take_next()) {
    post(step_, k, tr, true);
  }
}

}  // namespace gradsync::detail
