// Where a region's step values and operands live (region_state.h's Region): temporaries in
// the scratch buffer, views of parameters and of other steps, reorders into the layout a
// primitive wants, and the destination a step writes.
#pragma once
#include <dnnl.hpp>

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "region_state.h"
#include "scratch.h"

namespace odla_onednn {
namespace {

// A buffer only this region's calls read and write (an intermediate, a reordered operand):
// it lives in the thread's scratch buffer, at the offset place_temporaries gives it.
memory Region::temporary(const memory::desc& desc) {
  temporaries_.push_back({memory(desc, cpu_engine(), nullptr), 0});
  return temporaries_.back().value;
}

// Offsets for the temporaries such that two whose uses overlap in the actions never share
// bytes (the larger placed first, each at the lowest offset free over its actions): a
// buffer is reused once the last action reading it has run. A value computed in TVM's
// output takes no room.
void Region::place_temporaries() {
  std::unordered_map<dnnl_memory_t, size_t> owner;  // a memory, or a view of it: its temporary
  for (size_t i = 0; i < temporaries_.size(); ++i) owner[temporaries_[i].value.get()] = i;
  for (const auto& [value, output] : in_output_) owner.erase(value.get());
  auto alias = [&](const memory& source, const memory& view) {
    auto found = owner.find(source.get());
    if (found != owner.end()) owner[view.get()] = found->second;
  };
  for (const auto& [value, writer] : writers_) alias(value, writer);
  for (const auto& [source, view] : step_views_) alias(source, view);
  std::vector<std::pair<size_t, size_t>> uses(temporaries_.size(), {SIZE_MAX, 0});
  for (size_t a = 0; a < actions_.size(); ++a)
    for (const auto& [kind, used] : actions_[a].args) {
      auto found = owner.find(used.get());
      if (found == owner.end()) continue;
      auto& [first, last] = uses[found->second];
      first = std::min(first, a);
      last = std::max(last, a);
    }
  std::vector<size_t> order;
  for (size_t i = 0; i < temporaries_.size(); ++i)
    if (uses[i].first != SIZE_MAX) order.push_back(i);
  auto size = [&](size_t i) { return aligned(temporaries_[i].value.get_desc().get_size()); };
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return size(a) > size(b); });
  std::vector<size_t> placed;
  for (size_t i : order) {
    std::vector<std::pair<size_t, size_t>> taken;  // byte ranges of those live at once
    for (size_t j : placed)
      if (uses[j].first <= uses[i].second && uses[i].first <= uses[j].second)
        taken.emplace_back(temporaries_[j].offset, temporaries_[j].offset + size(j));
    std::sort(taken.begin(), taken.end());
    size_t offset = 0;
    for (const auto& [begin, end] : taken) {
      if (offset + size(i) <= begin) break;
      offset = std::max(offset, end);
    }
    temporaries_[i].offset = offset;
    scratch_bytes_ = std::max(scratch_bytes_, offset + size(i));
    placed.push_back(i);
  }
}

memory& Region::value(Operand operand) {
  return operand.kind == Operand::kStep ? values_[operand.index] : params_[operand.index];
}

void Region::add_reorder(const memory& from, const memory& to) {
  actions_.push_back({dnnl::reorder(from, to), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}}});
}

// ``operand`` in layout ``desc``: itself when it has that layout, else a buffer a reorder
// fills each call (made once per operand and layout, however many steps read it).
memory Region::as_layout(Operand operand, const memory::desc& desc) {
  memory& source = value(operand);
  if (source.get_desc() == desc) return source;
  for (const auto& [from, converted] : converted_)
    if (from.kind == operand.kind && from.index == operand.index && converted.get_desc() == desc)
      return converted;
  memory converted = temporary(desc);
  add_reorder(source, converted);
  converted_.emplace_back(operand, converted);
  return converted;
}

// Parameter ``index`` read as ``desc`` (same bytes, another shape or order than plain).
memory Region::param_view(int index, const memory::desc& desc) {
  views_.emplace_back(index, memory(desc, cpu_engine(), nullptr));
  return views_.back().second;
}

// ``operand`` read as a plain tensor of ``dims``, its last two axes swapped if ``swapped``:
// the same bytes in another shape (a per-channel bias (C, 1, 1) as (C,), new leading axes of
// size 1), viewed, never reordered (a reorder cannot change dims).
memory Region::plain_view(Operand operand, const Dims& dims, bool swapped) {
  memory::desc desc = plain_desc(dims);
  if (swapped) {  // the same bytes with the strides of the last two axes exchanged
    size_t rank = dims.size();
    Dims unswapped = dims;
    std::swap(unswapped[rank - 1], unswapped[rank - 2]);
    Dims strides = plain_desc(unswapped).get_strides();
    std::swap(strides[rank - 1], strides[rank - 2]);
    desc = memory::desc(dims, memory::data_type::f32, strides);
  }
  if (operand.kind == Operand::kParam) return param_view(operand.index, desc);
  return step_view(as_layout(operand, plain_desc(value(operand).get_desc().get_dims())), desc);
}

// ``source`` (a step's value) read as ``desc``: its buffer may move each call (a
// result computed in TVM's output), and the view follows it.
memory Region::step_view(const memory& source, const memory::desc& desc) {
  memory view(desc, cpu_engine(), source.get_data_handle());
  step_views_.emplace_back(source, view);
  return view;
}

std::vector<PostOp> Region::post_ops(const Step& s) {
  return std::vector<PostOp>(s.post_ops, s.post_ops + s.post_op_count);
}

std::vector<Operand> Region::concat_sources(const Step& s) {
  if (s.kind != Step::kConcat) return {};
  return std::vector<Operand>(s.sources, s.sources + s.source_count);
}

// Whether anything but step ``current``'s residual add reads step ``index``'s buffer (its
// value or a view of it): the current step's other operands, a later step, a region result.
bool Region::read_elsewhere(int index, size_t current) const {
  const int buffer = buffers_[index];
  auto shares = [&](int step) { return step < static_cast<int>(buffers_.size()) &&
                                       buffers_[step] == buffer; };
  for (int result : results_)
    if (shares(result)) return true;
  auto reads = [&](Operand o) { return o.kind == Operand::kStep && shares(o.index); };
  for (size_t i = current; i < steps_.size(); ++i) {
    const Step& s = steps_[i];
    if (reads(s.src) || reads(s.weights) || reads(s.bias)) return true;
    for (const Operand& source : concat_sources(s))
      if (reads(source)) return true;
    for (const PostOp& op : post_ops(s))
      if (reads(op.operand) && !(i == current && op.kind == PostOp::kResidual)) return true;
  }
  return false;
}

// Where a step writes. A sum post-op adds to what dst holds, so dst must hold the residual:
// the residual's own buffer when it is in the same layout and nothing reads it later (no
// copy), else a fresh buffer it is copied into first.
memory Region::destination(const Step& s, const memory::desc& desc) {
  for (const PostOp& op : post_ops(s)) {
    if (op.kind != PostOp::kResidual) continue;
    if (op.operand.kind == Operand::kStep && value(op.operand).get_desc() == desc &&
        !read_elsewhere(op.operand.index, values_.size())) {
      buffer_of_next_ = buffers_[op.operand.index];
      return value(op.operand);
    }
    memory dst = temporary(desc);
    add_reorder(value(op.operand), dst);
    return dst;
  }
  return temporary(desc);
}

void Region::finish_step(const Step& s, dnnl::primitive primitive, const memory::desc& dst_desc,
                         std::unordered_map<int, memory> args) {
  memory dst = destination(s, dst_desc);
  args[DNNL_ARG_DST] = dst;
  actions_.push_back({primitive, std::move(args)});
  push_value(dst);
}

// Step values_.size()'s value; its buffer is its own unless destination() or a view said
// otherwise.
void Region::push_value(const memory& value) {
  buffers_.push_back(buffer_of_next_ >= 0 ? buffer_of_next_
                                          : static_cast<int>(values_.size()));
  buffer_of_next_ = -1;
  values_.push_back(value);
}

}  // namespace
}  // namespace odla_onednn
