// Completion queues, counters and event queues: libfabric's entry points. Reading a queue or a
// counter runs the domain's progress first (FI_PROGRESS_MANUAL).
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "lib/core/types.h"
#include "lib/ofi/entry_points.h"
#include "lib/ofi/objects.h"

namespace metaroce::ofi {

namespace {

using Clock = std::chrono::steady_clock;

// Copies `e` into the caller's entry of `format`; returns the entry's size.
size_t Store(fi_cq_format format, const CqEntry& e, void* out) {
  switch (format) {
    case FI_CQ_FORMAT_CONTEXT: {
      auto* c = static_cast<fi_cq_entry*>(out);
      c->op_context = e.op_context;
      return sizeof(*c);
    }
    case FI_CQ_FORMAT_MSG: {
      auto* c = static_cast<fi_cq_msg_entry*>(out);
      *c = {e.op_context, e.flags, e.len};
      return sizeof(*c);
    }
    case FI_CQ_FORMAT_DATA: {
      auto* c = static_cast<fi_cq_data_entry*>(out);
      *c = {e.op_context, e.flags, e.len, e.buf, e.data};
      return sizeof(*c);
    }
    default: {
      auto* c = static_cast<fi_cq_tagged_entry*>(out);
      *c = {e.op_context, e.flags, e.len, e.buf, e.data, e.tag};
      return sizeof(*c);
    }
  }
}

// fi_cq_readfrom under the domain's lock (held by the caller).
ssize_t ReadLocked(Cq* cq, void* buf, size_t count, fi_addr_t* src) {
  if (cq->entries.empty()) cq->domain->Progress();
  if (cq->entries.empty()) return -FI_EAGAIN;
  if (cq->entries.front().err != 0) return -FI_EAVAIL;
  size_t n = 0;
  auto* out = static_cast<char*>(buf);
  while (n < count && !cq->entries.empty() && cq->entries.front().err == 0) {
    const CqEntry& e = cq->entries.front();
    out += Store(cq->format, e, out);
    if (src != nullptr) src[n] = e.source;
    cq->entries.pop_front();
    ++n;
  }
  return static_cast<ssize_t>(n);
}

ssize_t ReadFrom(fid_cq* f, void* buf, size_t count, fi_addr_t* src) {
  auto* cq = FromFid<Cq>(f);
  std::lock_guard<std::mutex> lock(cq->domain->mu);
  return ReadLocked(cq, buf, count, src);
}

ssize_t Read(fid_cq* f, void* buf, size_t count) { return ReadFrom(f, buf, count, nullptr); }

ssize_t ReadErr(fid_cq* f, fi_cq_err_entry* buf, uint64_t) {
  auto* cq = FromFid<Cq>(f);
  std::lock_guard<std::mutex> lock(cq->domain->mu);
  if (cq->entries.empty() || cq->entries.front().err == 0) return -FI_EAGAIN;
  const CqEntry e = cq->entries.front();
  cq->entries.pop_front();
  buf->op_context = e.op_context;
  buf->flags = e.flags;
  buf->len = e.len;
  buf->buf = e.buf;
  buf->data = e.data;
  buf->tag = e.tag;
  buf->olen = e.olen;
  buf->err = e.err;
  buf->prov_errno = e.prov_errno;
  buf->err_data = nullptr;
  if (FI_VERSION_GE(cq->domain->api_version(), FI_VERSION(1, 5))) buf->err_data_size = 0;
  return 1;
}

// fi_cq_sread (fi_cq(3)): returns an entry, -FI_EAVAIL, or -FI_EAGAIN when the timeout passes
// (a negative timeout: none) or fi_cq_signal was called. Between attempts the thread sleeps on
// the CQ (Cq::wake), which an entry pushed by another thread or fi_cq_signal wakes at once.
// FI_PROGRESS_AUTO: the domain's progress thread makes the entries, so the sleep lasts until
// one comes. Manual progress: nothing progresses but the application's calls (and, inline, the
// watchdog), so the sleep is cut short to progress again: after kFirstNap, doubling to kLongestNap
// while nothing comes (a peer's message is found within ~1 ms of arriving, and an idle wait
// costs a wake-up a millisecond, not a CPU).
constexpr auto kFirstNap = std::chrono::microseconds(20);
constexpr auto kLongestNap = std::chrono::microseconds(1000);

ssize_t SReadFrom(fid_cq* f, void* buf, size_t count, fi_addr_t* src, const void*,
                  int timeout_ms) {
  auto* cq = FromFid<Cq>(f);
  Domain& d = *cq->domain;
  const bool auto_progress = d.info().domain_attr->data_progress == FI_PROGRESS_AUTO;
  const Clock::time_point deadline =
      timeout_ms >= 0 ? Clock::now() + std::chrono::milliseconds(timeout_ms)
                      : Clock::time_point::max();
  std::chrono::microseconds nap = kFirstNap;
  std::unique_lock<std::mutex> lock(d.mu);
  for (;;) {
    const ssize_t n = ReadLocked(cq, buf, count, src);
    if (n != -FI_EAGAIN) return n;
    if (cq->signaled) {
      cq->signaled = false;
      return -FI_EAGAIN;
    }
    const Clock::time_point now = Clock::now();
    if (now >= deadline) return -FI_EAGAIN;
    // (at most a second at a time: the loop goes on, and no clock arithmetic nears max())
    const Clock::time_point until =
        std::min(deadline, now + (auto_progress ? std::chrono::microseconds(1'000'000) : nap));
    const uint64_t delivered = d.delivered;
    ++cq->sleepers;
    cq->wake.wait_until(lock, until, [&] { return cq->signaled || !cq->entries.empty(); });
    --cq->sleepers;
    nap = d.delivered != delivered ? kFirstNap : std::min(nap * 2, kLongestNap);
  }
}

ssize_t SRead(fid_cq* f, void* buf, size_t count, const void* cond, int timeout_ms) {
  return SReadFrom(f, buf, count, nullptr, cond, timeout_ms);
}

// fi_cq_signal: wakes a thread in fi_cq_sread, or, if none waits, makes the next one return
// -FI_EAGAIN at once (fabtests' cq_signal signals first, then reads).
int Signal(fid_cq* f) {
  auto* cq = FromFid<Cq>(f);
  std::lock_guard<std::mutex> lock(cq->domain->mu);
  cq->signaled = true;
  cq->wake.notify_all();
  return 0;
}

const char* CqStrError(fid_cq*, int prov_errno, const void*, char* buf, size_t len) {
  const std::string_view s = core::StatusStr(static_cast<core::WcStatus>(prov_errno));
  if (buf != nullptr && len > 0) {
    const size_t n = std::min(len - 1, s.size());
    std::memcpy(buf, s.data(), n);
    buf[n] = '\0';
    return buf;
  }
  return s.data();
}

int CqClose(fid* f) {
  auto* cq = FromFid<Cq>(f);
  if (cq->refs.load() > 0) return -FI_EBUSY;
  --cq->domain->refs;
  delete cq;
  return 0;
}

fi_ops kCqFidOps = {sizeof(fi_ops), CqClose, METAROCE_ENOSYS(fi_ops, bind),
                    METAROCE_ENOSYS(fi_ops, control), METAROCE_ENOSYS(fi_ops, ops_open), nullptr,
                    nullptr};
fi_ops_cq kCqOps = {sizeof(fi_ops_cq), Read, ReadFrom, ReadErr, SRead, SReadFrom, Signal,
                    CqStrError};

// ---- Counters ----

uint64_t CntrRead(fid_cntr* f) {
  auto* c = FromFid<Cntr>(f);
  {
    std::lock_guard<std::mutex> lock(c->domain->mu);
    c->domain->Progress();
  }
  return c->value.load();
}
uint64_t CntrReadErr(fid_cntr* f) {
  auto* c = FromFid<Cntr>(f);
  {
    std::lock_guard<std::mutex> lock(c->domain->mu);
    c->domain->Progress();
  }
  return c->errors.load();
}
int CntrAdd(fid_cntr* f, uint64_t v) {
  FromFid<Cntr>(f)->value += v;
  return 0;
}
int CntrSet(fid_cntr* f, uint64_t v) {
  FromFid<Cntr>(f)->value = v;
  return 0;
}
int CntrAddErr(fid_cntr* f, uint64_t v) {
  FromFid<Cntr>(f)->errors += v;
  return 0;
}
int CntrSetErr(fid_cntr* f, uint64_t v) {
  FromFid<Cntr>(f)->errors = v;
  return 0;
}
int CntrWait(fid_cntr* f, uint64_t threshold, int timeout_ms) {
  auto* c = FromFid<Cntr>(f);
  const uint64_t errors = c->errors.load();
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(c->domain->mu);
      c->domain->Progress();
    }
    if (c->value.load() >= threshold) return 0;
    if (c->errors.load() != errors) return -FI_EAVAIL;
    if (timeout_ms >= 0 && Clock::now() >= deadline) return -FI_ETIMEDOUT;
    sched_yield();
  }
}

int CntrClose(fid* f) {
  auto* c = FromFid<Cntr>(f);
  if (c->refs.load() > 0) return -FI_EBUSY;
  --c->domain->refs;
  delete c;
  return 0;
}

fi_ops kCntrFidOps = {sizeof(fi_ops), CntrClose, METAROCE_ENOSYS(fi_ops, bind),
                      METAROCE_ENOSYS(fi_ops, control), METAROCE_ENOSYS(fi_ops, ops_open),
                      nullptr, nullptr};
fi_ops_cntr kCntrOps = {sizeof(fi_ops_cntr), CntrRead,   CntrReadErr, CntrAdd,
                        CntrSet,             CntrWait,   CntrAddErr,  CntrSetErr};

// ---- Event queues: an RDM endpoint reports no event ----

ssize_t EqRead(fid_eq*, uint32_t*, void*, size_t, uint64_t) { return -FI_EAGAIN; }
ssize_t EqReadErr(fid_eq*, fi_eq_err_entry*, uint64_t) { return -FI_EAGAIN; }
ssize_t EqSRead(fid_eq*, uint32_t*, void*, size_t, int timeout_ms, uint64_t) {
  // Nothing ever comes: sleep the timeout through rather than spin.
  if (timeout_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
  return -FI_EAGAIN;
}
const char* EqStrError(fid_eq*, int, const void*, char* buf, size_t len) {
  if (buf != nullptr && len > 0) buf[0] = '\0';
  return "";
}
int EqClose(fid* f) {
  delete FromFid<Eq>(f);
  return 0;
}
fi_ops kEqFidOps = {sizeof(fi_ops), EqClose, METAROCE_ENOSYS(fi_ops, bind),
                    METAROCE_ENOSYS(fi_ops, control), METAROCE_ENOSYS(fi_ops, ops_open), nullptr,
                    nullptr};
fi_ops_eq kEqOps = {sizeof(fi_ops_eq), EqRead, EqReadErr, METAROCE_ENOSYS(fi_ops_eq, write),
                    EqSRead, EqStrError};

}  // namespace

int OpenCq(fid_domain* dom, fi_cq_attr* attr, fid_cq** out, void* context) {
  auto* d = FromFid<Domain>(dom);
  fi_cq_format format = attr != nullptr ? attr->format : FI_CQ_FORMAT_UNSPEC;
  if (format == FI_CQ_FORMAT_UNSPEC) format = FI_CQ_FORMAT_CONTEXT;
  if (format > FI_CQ_FORMAT_TAGGED) return -FI_ENOSYS;
  if (attr != nullptr && attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC) {
    return -FI_ENOSYS;
  }
  auto* cq = new Cq;
  std::memset(&cq->fid, 0, sizeof(cq->fid));
  cq->fid.fid.fclass = FI_CLASS_CQ;
  cq->fid.fid.context = context;
  cq->fid.fid.ops = &kCqFidOps;
  cq->fid.ops = &kCqOps;
  cq->domain = d;
  cq->delivered = &d->delivered;
  cq->format = format;
  ++d->refs;
  *out = &cq->fid;
  return 0;
}

int OpenCntr(fid_domain* dom, fi_cntr_attr* attr, fid_cntr** out, void* context) {
  auto* d = FromFid<Domain>(dom);
  if (attr != nullptr && attr->events != FI_CNTR_EVENTS_COMP) return -FI_ENOSYS;
  if (attr != nullptr && attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC) {
    return -FI_ENOSYS;
  }
  auto* c = new Cntr;
  std::memset(&c->fid, 0, sizeof(c->fid));
  c->fid.fid.fclass = FI_CLASS_CNTR;
  c->fid.fid.context = context;
  c->fid.fid.ops = &kCntrFidOps;
  c->fid.ops = &kCntrOps;
  c->domain = d;
  ++d->refs;
  *out = &c->fid;
  return 0;
}

int OpenEq(fid_fabric*, fi_eq_attr* attr, fid_eq** out, void* context) {
  if (attr != nullptr && attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC) {
    return -FI_ENOSYS;
  }
  auto* eq = new Eq;
  std::memset(&eq->fid, 0, sizeof(eq->fid));
  eq->fid.fid.fclass = FI_CLASS_EQ;
  eq->fid.fid.context = context;
  eq->fid.fid.ops = &kEqFidOps;
  eq->fid.ops = &kEqOps;
  *out = &eq->fid;
  return 0;
}

}  // namespace metaroce::ofi
