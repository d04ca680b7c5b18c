// The endpoint's libfabric entry points: fid_ep's ops (control, CM, messages, tagged messages,
// RMA writes), each taking the domain's lock and calling Endpoint (endpoint.h).
#include <rdma/fi_atomic.h>

#include <cstring>

#include "lib/ofi/endpoint.h"
#include "lib/ofi/entry_points.h"

namespace metaroce::ofi {
namespace {

Endpoint* Ep(fid_ep* f) { return FromFid<Endpoint>(f); }
Endpoint* Ep(fid* f) { return FromFid<Endpoint>(f); }

// After a post: in inline mode the engine sends it now rather than at the next read of a queue.
void Kick(Endpoint* ep) { ep->domain().context().Poll(); }

int Close(fid* f) {
  Endpoint* ep = Ep(f);
  Domain& d = ep->domain();
  {
    std::lock_guard<std::mutex> lock(d.mu);
    ep->Linger();
    d.RemoveEndpoint(ep);
    delete ep;
  }
  --d.refs;
  return 0;
}

int Bind(fid* f, fid* bfid, uint64_t flags) {
  Endpoint* ep = Ep(f);
  std::lock_guard<std::mutex> lock(ep->domain().mu);
  return ep->Bind(bfid, flags);
}

int Control(fid* f, int command, void* arg) {
  Endpoint* ep = Ep(f);
  std::lock_guard<std::mutex> lock(ep->domain().mu);
  switch (command) {
    case FI_ENABLE:
      return ep->Enable();
    case FI_GETOPSFLAG: {
      auto* flags = static_cast<uint64_t*>(arg);
      *flags = (*flags & FI_TRANSMIT) ? ep->tx_op_flags() : ep->rx_op_flags();
      return 0;
    }
    default:
      return -FI_ENOSYS;
  }
}

fi_ops kFidOps = {sizeof(fi_ops), Close, Bind, Control, METAROCE_ENOSYS(fi_ops, ops_open),
                  nullptr, nullptr};

ssize_t Cancel(fid_t f, void* context) {
  Endpoint* ep = Ep(f);
  std::lock_guard<std::mutex> lock(ep->domain().mu);
  return ep->Cancel(context);
}

int GetOpt(fid_t, int, int, void*, size_t*) { return -FI_ENOPROTOOPT; }
int SetOpt(fid_t, int, int, const void*, size_t) { return -FI_ENOPROTOOPT; }
ssize_t SizeLeft(fid_ep*) { return static_cast<ssize_t>(kQueueSize); }

fi_ops_ep kEpOps = {sizeof(fi_ops_ep),
                    Cancel,
                    GetOpt,
                    SetOpt,
                    METAROCE_ENOSYS(fi_ops_ep, tx_ctx),
                    METAROCE_ENOSYS(fi_ops_ep, rx_ctx),
                    SizeLeft,
                    SizeLeft};

int GetName(fid_t f, void* addr, size_t* addrlen) {
  Endpoint* ep = Ep(f);
  std::lock_guard<std::mutex> lock(ep->domain().mu);
  return ep->GetName(addr, addrlen);
}

fi_ops_cm kCmOps = {sizeof(fi_ops_cm),
                    METAROCE_ENOSYS(fi_ops_cm, setname),
                    GetName,
                    METAROCE_ENOSYS(fi_ops_cm, getpeer),
                    METAROCE_ENOSYS(fi_ops_cm, connect),
                    METAROCE_ENOSYS(fi_ops_cm, listen),
                    METAROCE_ENOSYS(fi_ops_cm, accept),
                    METAROCE_ENOSYS(fi_ops_cm, reject),
                    METAROCE_ENOSYS(fi_ops_cm, shutdown),
                    METAROCE_ENOSYS(fi_ops_cm, join)};

// ---- Messages ----

using Report = Endpoint::Report;

ssize_t DoSend(fid_ep* f, const IoList& data, void** desc, fi_addr_t dest, void* context,
               uint64_t flags, bool tagged, uint64_t tag, uint64_t cq_data,
               Report report = Report::kByFlags) {
  Endpoint* ep = Ep(f);
  std::lock_guard<std::mutex> lock(ep->domain().mu);
  const ssize_t r = ep->Send(data, desc, dest, context, flags, tagged, tag, cq_data, report);
  if (r == 0) Kick(ep);
  return r;
}

ssize_t DoRecv(fid_ep* f, const IoList& buf, void** desc, fi_addr_t src, void* context,
               uint64_t flags, bool tagged, uint64_t tag, uint64_t ignore) {
  Endpoint* ep = Ep(f);
  std::lock_guard<std::mutex> lock(ep->domain().mu);
  return ep->Recv(buf, desc, src, context, flags, tagged, tag, ignore);
}

ssize_t Recv(fid_ep* f, void* buf, size_t len, void* desc, fi_addr_t src, void* context) {
  return DoRecv(f, IoList::Of(buf, len), &desc, src, context, Ep(f)->rx_op_flags(), false, 0,
                0);
}
ssize_t RecvV(fid_ep* f, const iovec* iov, void** desc, size_t count, fi_addr_t src,
              void* context) {
  return DoRecv(f, IoList::Of(iov, count), desc, src, context, Ep(f)->rx_op_flags(), false, 0,
                0);
}
ssize_t RecvMsg(fid_ep* f, const fi_msg* m, uint64_t flags) {
  return DoRecv(f, IoList::Of(m->msg_iov, m->iov_count), m->desc, m->addr, m->context, flags,
                false, 0, 0);
}
ssize_t Send(fid_ep* f, const void* buf, size_t len, void* desc, fi_addr_t dest,
             void* context) {
  return DoSend(f, IoList::Of(buf, len), &desc, dest, context, Ep(f)->tx_op_flags(), false, 0,
                0);
}
ssize_t SendV(fid_ep* f, const iovec* iov, void** desc, size_t count, fi_addr_t dest,
              void* context) {
  return DoSend(f, IoList::Of(iov, count), desc, dest, context, Ep(f)->tx_op_flags(), false, 0,
                0);
}
ssize_t SendMsg(fid_ep* f, const fi_msg* m, uint64_t flags) {
  return DoSend(f, IoList::Of(m->msg_iov, m->iov_count), m->desc, m->addr, m->context, flags,
                false, 0, m->data);
}
ssize_t Inject(fid_ep* f, const void* buf, size_t len, fi_addr_t dest) {
  return DoSend(f, IoList::Of(buf, len), nullptr, dest, nullptr, FI_INJECT, false, 0, 0,
                Report::kNever);
}
ssize_t SendData(fid_ep* f, const void* buf, size_t len, void* desc, uint64_t data,
                 fi_addr_t dest, void* context) {
  return DoSend(f, IoList::Of(buf, len), &desc, dest, context,
                Ep(f)->tx_op_flags() | FI_REMOTE_CQ_DATA, false, 0, data);
}
ssize_t InjectData(fid_ep* f, const void* buf, size_t len, uint64_t data, fi_addr_t dest) {
  return DoSend(f, IoList::Of(buf, len), nullptr, dest, nullptr, FI_INJECT | FI_REMOTE_CQ_DATA,
                false, 0, data, Report::kNever);
}

fi_ops_msg kMsgOps = {sizeof(fi_ops_msg), Recv,   RecvV,    RecvMsg,   Send,
                      SendV,              SendMsg, Inject, SendData, InjectData};

// ---- Tagged messages ----

ssize_t TRecv(fid_ep* f, void* buf, size_t len, void* desc, fi_addr_t src, uint64_t tag,
              uint64_t ignore, void* context) {
  return DoRecv(f, IoList::Of(buf, len), &desc, src, context, Ep(f)->rx_op_flags(), true, tag,
                ignore);
}
ssize_t TRecvV(fid_ep* f, const iovec* iov, void** desc, size_t count, fi_addr_t src,
               uint64_t tag, uint64_t ignore, void* context) {
  return DoRecv(f, IoList::Of(iov, count), desc, src, context, Ep(f)->rx_op_flags(), true, tag,
                ignore);
}
ssize_t TRecvMsg(fid_ep* f, const fi_msg_tagged* m, uint64_t flags) {
  return DoRecv(f, IoList::Of(m->msg_iov, m->iov_count), m->desc, m->addr, m->context, flags,
                true, m->tag, m->ignore);
}
ssize_t TSend(fid_ep* f, const void* buf, size_t len, void* desc, fi_addr_t dest, uint64_t tag,
              void* context) {
  return DoSend(f, IoList::Of(buf, len), &desc, dest, context, Ep(f)->tx_op_flags(), true, tag,
                0);
}
ssize_t TSendV(fid_ep* f, const iovec* iov, void** desc, size_t count, fi_addr_t dest,
               uint64_t tag, void* context) {
  return DoSend(f, IoList::Of(iov, count), desc, dest, context, Ep(f)->tx_op_flags(), true, tag,
                0);
}
ssize_t TSendMsg(fid_ep* f, const fi_msg_tagged* m, uint64_t flags) {
  return DoSend(f, IoList::Of(m->msg_iov, m->iov_count), m->desc, m->addr, m->context, flags,
                true, m->tag, m->data);
}
ssize_t TInject(fid_ep* f, const void* buf, size_t len, fi_addr_t dest, uint64_t tag) {
  return DoSend(f, IoList::Of(buf, len), nullptr, dest, nullptr, FI_INJECT, true, tag, 0,
                Report::kNever);
}
ssize_t TSendData(fid_ep* f, const void* buf, size_t len, void* desc, uint64_t data,
                  fi_addr_t dest, uint64_t tag, void* context) {
  return DoSend(f, IoList::Of(buf, len), &desc, dest, context,
                Ep(f)->tx_op_flags() | FI_REMOTE_CQ_DATA, true, tag, data);
}
ssize_t TInjectData(fid_ep* f, const void* buf, size_t len, uint64_t data, fi_addr_t dest,
                    uint64_t tag) {
  return DoSend(f, IoList::Of(buf, len), nullptr, dest, nullptr, FI_INJECT | FI_REMOTE_CQ_DATA,
                true, tag, data, Report::kNever);
}

fi_ops_tagged kTaggedOps = {sizeof(fi_ops_tagged), TRecv,   TRecvV,   TRecvMsg,
                            TSend,                 TSendV,  TSendMsg, TInject,
                            TSendData,             TInjectData};

// ---- RMA: writes (MetaRoCE has no RDMA Read) ----

ssize_t DoWrite(fid_ep* f, const IoList& data, void** desc, fi_addr_t dest, uint64_t addr,
                uint64_t key, void* context, uint64_t flags, uint64_t cq_data,
                Report report = Report::kByFlags) {
  Endpoint* ep = Ep(f);
  std::lock_guard<std::mutex> lock(ep->domain().mu);
  const ssize_t r = ep->Write(data, desc, dest, addr, key, context, flags, cq_data, report);
  if (r == 0) Kick(ep);
  return r;
}

ssize_t Write(fid_ep* f, const void* buf, size_t len, void* desc, fi_addr_t dest, uint64_t addr,
              uint64_t key, void* context) {
  return DoWrite(f, IoList::Of(buf, len), &desc, dest, addr, key, context, Ep(f)->tx_op_flags(),
                 0);
}
ssize_t WriteV(fid_ep* f, const iovec* iov, void** desc, size_t count, fi_addr_t dest,
               uint64_t addr, uint64_t key, void* context) {
  return DoWrite(f, IoList::Of(iov, count), desc, dest, addr, key, context,
                 Ep(f)->tx_op_flags(), 0);
}
ssize_t WriteMsg(fid_ep* f, const fi_msg_rma* m, uint64_t flags) {
  if (m->rma_iov_count != 1) return -FI_EINVAL;
  return DoWrite(f, IoList::Of(m->msg_iov, m->iov_count), m->desc, m->addr,
                 m->rma_iov[0].addr, m->rma_iov[0].key, m->context, flags, m->data);
}
ssize_t WriteInject(fid_ep* f, const void* buf, size_t len, fi_addr_t dest, uint64_t addr,
                    uint64_t key) {
  return DoWrite(f, IoList::Of(buf, len), nullptr, dest, addr, key, nullptr, FI_INJECT, 0,
                 Report::kNever);
}
ssize_t WriteData(fid_ep* f, const void* buf, size_t len, void* desc, uint64_t data,
                  fi_addr_t dest, uint64_t addr, uint64_t key, void* context) {
  return DoWrite(f, IoList::Of(buf, len), &desc, dest, addr, key, context,
                 Ep(f)->tx_op_flags() | FI_REMOTE_CQ_DATA, data);
}
ssize_t WriteInjectData(fid_ep* f, const void* buf, size_t len, uint64_t data, fi_addr_t dest,
                        uint64_t addr, uint64_t key) {
  return DoWrite(f, IoList::Of(buf, len), nullptr, dest, addr, key, nullptr,
                 FI_INJECT | FI_REMOTE_CQ_DATA, data, Report::kNever);
}

fi_ops_rma kRmaOps = {sizeof(fi_ops_rma),
                      METAROCE_ENOSYS(fi_ops_rma, read),
                      METAROCE_ENOSYS(fi_ops_rma, readv),
                      METAROCE_ENOSYS(fi_ops_rma, readmsg),
                      Write,
                      WriteV,
                      WriteMsg,
                      WriteInject,
                      WriteData,
                      WriteInjectData};

fi_ops_atomic kAtomicOps = {sizeof(fi_ops_atomic),
                            METAROCE_ENOSYS(fi_ops_atomic, write),
                            METAROCE_ENOSYS(fi_ops_atomic, writev),
                            METAROCE_ENOSYS(fi_ops_atomic, writemsg),
                            METAROCE_ENOSYS(fi_ops_atomic, inject),
                            METAROCE_ENOSYS(fi_ops_atomic, readwrite),
                            METAROCE_ENOSYS(fi_ops_atomic, readwritev),
                            METAROCE_ENOSYS(fi_ops_atomic, readwritemsg),
                            METAROCE_ENOSYS(fi_ops_atomic, compwrite),
                            METAROCE_ENOSYS(fi_ops_atomic, compwritev),
                            METAROCE_ENOSYS(fi_ops_atomic, compwritemsg),
                            METAROCE_ENOSYS(fi_ops_atomic, writevalid),
                            METAROCE_ENOSYS(fi_ops_atomic, readwritevalid),
                            METAROCE_ENOSYS(fi_ops_atomic, compwritevalid)};

}  // namespace

int OpenEndpoint(Domain* d, fi_info* info, fid_ep** out, void* context) {
  if (info == nullptr || info->ep_attr == nullptr || info->ep_attr->type != FI_EP_RDM) {
    return -FI_EINVAL;
  }
  auto* ep = new Endpoint(*d, *info, context);
  ep->fid.fid.fclass = FI_CLASS_EP;
  ep->fid.fid.context = context;
  ep->fid.fid.ops = &kFidOps;
  ep->fid.ops = &kEpOps;
  ep->fid.cm = &kCmOps;
  ep->fid.msg = &kMsgOps;
  ep->fid.rma = &kRmaOps;
  ep->fid.tagged = &kTaggedOps;
  ep->fid.atomic = &kAtomicOps;
  {
    std::lock_guard<std::mutex> lock(d->mu);
    d->AddEndpoint(ep);
  }
  ++d->refs;
  *out = &ep->fid;
  return 0;
}

}  // namespace metaroce::ofi
