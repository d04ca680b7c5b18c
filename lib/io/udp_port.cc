#include "lib/io/udp_port.h"

#include <arpa/inet.h>
#include <liburing.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "lib/io/udp_segmentation.h"

namespace metaroce::io {

struct UdpPort::Socket {
  int fd = -1;
  uint16_t port = 0;
  uint64_t last_used = 0;
  uint32_t references = 0;  // slots (posted or lent receives, in-flight sends) naming it
  bool closing = false;
  std::vector<uint32_t> queued;  // batched calls: send slots waiting for Flush(), in order
};

struct UdpPort::Slot {
  uint32_t index = 0;
  bool posted = false;  // a RECVMSG is in the kernel for it
  uint32_t length = 0;
  int tos = 0;  // sends: the datagram's ECN codepoint (its IP_TOS / IPV6_TCLASS message)
  Socket* owner = nullptr;
  msghdr msg{};
  iovec iov{};
  sockaddr_storage peer{};
  alignas(cmsghdr) unsigned char control[CMSG_SPACE(sizeof(int)) * 2] = {};
  std::unique_ptr<std::byte[]> data;
};

namespace {

// io_uring user_data: kind in the top byte, slot index below.
constexpr uint64_t kKindShift = 56;
constexpr uint64_t kKindReceive = 1;
constexpr uint64_t kKindSend = 2;
constexpr uint64_t kKindCancel = 3;
constexpr uint64_t UserData(uint64_t kind, uint32_t index) { return kind << kKindShift | index; }

constexpr int kEct0 = 0x02;
constexpr uint8_t kCe = 0x03;
constexpr int kMaxBatch = 64;

// A segmented message's control data: the ECN codepoint and the segment size.
struct SegmentControl {
  alignas(cmsghdr) unsigned char bytes[CMSG_SPACE(sizeof(int)) + kSegmentControlSpace];
};

bool SamePeer(const msghdr& a, const msghdr& b) {
  return a.msg_namelen == b.msg_namelen && std::memcmp(a.msg_name, b.msg_name, a.msg_namelen) == 0;
}

void FillSockaddr(const IpAddress& ip, uint16_t port, sockaddr_storage* out, socklen_t* length) {
  std::memset(out, 0, sizeof *out);
  if (ip.v6) {
    auto* s = reinterpret_cast<sockaddr_in6*>(out);
    s->sin6_family = AF_INET6;
    s->sin6_port = htons(port);
    std::memcpy(&s->sin6_addr, ip.bytes.data(), 16);
    *length = sizeof(sockaddr_in6);
  } else {
    auto* s = reinterpret_cast<sockaddr_in*>(out);
    s->sin_family = AF_INET;
    s->sin_port = htons(port);
    std::memcpy(&s->sin_addr, ip.bytes.data(), 4);
    *length = sizeof(sockaddr_in);
  }
}

void ReadSockaddr(const sockaddr_storage& in, IpAddress* ip, uint16_t* port) {
  *ip = IpAddress{};
  if (in.ss_family == AF_INET6) {
    const auto* s = reinterpret_cast<const sockaddr_in6*>(&in);
    ip->v6 = true;
    std::memcpy(ip->bytes.data(), &s->sin6_addr, 16);
    *port = ntohs(s->sin6_port);
  } else {
    const auto* s = reinterpret_cast<const sockaddr_in*>(&in);
    std::memcpy(ip->bytes.data(), &s->sin_addr, 4);
    *port = ntohs(s->sin_port);
  }
}

bool CongestionExperienced(const msghdr& msg) {
  for (const cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr;
       c = CMSG_NXTHDR(const_cast<msghdr*>(&msg), const_cast<cmsghdr*>(c))) {
    if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS) {
      return (*CMSG_DATA(c) & kCe) == kCe;  // one byte
    }
    if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS) {
      int tclass;
      std::memcpy(&tclass, CMSG_DATA(c), sizeof tclass);
      return (tclass & kCe) == kCe;
    }
  }
  return false;
}

}  // namespace

UdpPort::UdpPort(Options options) : options_(std::move(options)) {}

UdpPort::~UdpPort() {
  if (ring_) io_uring_queue_exit(ring_.get());  // cancels and waits for every request
  for (auto& [port, socket] : sockets_) close(socket->fd);
  for (auto& socket : closing_sockets_) close(socket->fd);
  if (wait_fd_ >= 0 && wait_fd_ != epoll_fd_) close(wait_fd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
}

absl::StatusOr<std::unique_ptr<UdpPort>> UdpPort::Open(Options options) {
  std::unique_ptr<UdpPort> port(new UdpPort(std::move(options)));
  if (absl::Status s = port->Init(); !s.ok()) return s;
  return port;
}

absl::Status UdpPort::Init() {
  const Options& o = options_;
  if (o.udp_port == 0 || o.receive_slots == 0 || o.send_slots == 0 || o.buffer_bytes < 64 ||
      o.ring_entries == 0 || o.max_source_ports == 0) {
    return absl::InvalidArgumentError(
        "udp_port, receive_slots, send_slots, ring_entries, max_source_ports must be > 0 and "
        "buffer_bytes >= 64");
  }
  if (o.io_uring) {
    auto ring = std::make_unique<io_uring>();
    io_uring_params params{};
    params.flags = IORING_SETUP_CQSIZE;
    const uint64_t outstanding = uint64_t{o.receive_slots} +
                                 uint64_t{o.receive_slots_per_source_port} * o.max_source_ports +
                                 o.send_slots;
    params.cq_entries = static_cast<uint32_t>(
        std::min<uint64_t>(65536, std::bit_ceil(std::max<uint64_t>(outstanding,
                                                                   2ull * o.ring_entries))));
    const int err = io_uring_queue_init_params(o.ring_entries, ring.get(), &params);
    if (err == 0) {
      ring_ = std::move(ring);
      wait_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
      if (wait_fd_ < 0) return absl::ErrnoToStatus(errno, "eventfd");
      if (int e = io_uring_register_eventfd(ring_.get(), wait_fd_); e < 0) {
        return absl::ErrnoToStatus(-e, "io_uring_register_eventfd");
      }
    } else {
      fallback_reason_ = absl::StrCat("io_uring unavailable: ", std::strerror(-err));
    }
  }
  if (!ring_) {
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd_ < 0) return absl::ErrnoToStatus(errno, "epoll_create1");
    wait_fd_ = epoll_fd_;
  }
  for (uint32_t i = 0; i < o.send_slots; ++i) {
    auto slot = std::make_unique<Slot>();
    slot->index = i;
    slot->data = std::make_unique<std::byte[]>(o.buffer_bytes);
    tx_slots_.push_back(std::move(slot));
    free_tx_slots_.push_back(o.send_slots - 1 - i);
  }
  segmentation_ = o.segmentation && !ring_;
  segment_iovs_.resize(o.send_slots);
  absl::StatusOr<Socket*> main = OpenSocket(o.udp_port);
  if (!main.ok()) return main.status();
  port_socket_ = *main;
  if (ring_ && unsubmitted_ > 0) {
    io_uring_submit(ring_.get());
    unsubmitted_ = 0;
  }
  return absl::OkStatus();
}

absl::StatusOr<UdpPort::Socket*> UdpPort::OpenSocket(uint16_t port) {
  const IpAddress& local = options_.local_ip;
  const int family = local.v6 ? AF_INET6 : AF_INET;
  // Blocking sockets on purpose: io_uring returns EAGAIN instead of waiting on O_NONBLOCK files;
  // the fallback passes MSG_DONTWAIT where it must not block.
  const int fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::ErrnoToStatus(errno, "socket(SOCK_DGRAM)");
  const int one = 1;
  const int ect0 = kEct0;
  const int receive_buffer = 4 << 20;
  if (port != options_.udp_port) {
    // Source-port sockets may rebind a port a just-closed socket of ours held. Not the port
    // socket: two UDP sockets with SO_REUSEADDR would share its port and split its traffic.
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  }
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
  bool ok;
  if (local.v6) {
    const int probe = IPV6_PMTUDISC_PROBE;  // DF, like AfXdpPort's frames; no PMTU state
    ok = setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) == 0 &&
         setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &ect0, sizeof ect0) == 0 &&
         setsockopt(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, &one, sizeof one) == 0 &&
         setsockopt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &probe, sizeof probe) == 0;
  } else {
    const int probe = IP_PMTUDISC_PROBE;
    ok = setsockopt(fd, IPPROTO_IP, IP_TOS, &ect0, sizeof ect0) == 0 &&
         setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &one, sizeof one) == 0 &&
         setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &probe, sizeof probe) == 0;
  }
  if (!ok) {
    const int e = errno;
    close(fd);
    return absl::ErrnoToStatus(e, "setsockopt (ECN / PMTU options)");
  }
  sockaddr_storage address;
  socklen_t length;
  FillSockaddr(local, port, &address, &length);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), length) != 0) {
    const int e = errno;
    close(fd);
    std::string fix;
    if (e == EADDRINUSE) fix = ": another socket owns this UDP port (stop it or pick a port)";
    if (e == EADDRNOTAVAIL) fix = ": the address is on no interface of this network namespace";
    return absl::ErrnoToStatus(
        e, absl::StrCat("bind UDP ", local.ToString(), " port ", port, fix));
  }
  auto socket = std::make_unique<Socket>();
  socket->fd = fd;
  socket->port = port;
  socket->last_used = ++use_clock_;
  Socket* raw = socket.get();
  sockets_[port] = std::move(socket);

  if (ring_) {
    const uint32_t posts =
        port == options_.udp_port ? options_.receive_slots : options_.receive_slots_per_source_port;
    for (uint32_t i = 0; i < posts; ++i) PostReceive(TakeReceiveSlot(raw));
  } else {
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.ptr = raw;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0) {
      return absl::ErrnoToStatus(errno, "epoll_ctl(ADD)");
    }
  }
  return raw;
}

UdpPort::Socket* UdpPort::SocketFor(uint16_t src_port) {
  auto it = sockets_.find(src_port);
  if (it != sockets_.end()) {
    it->second->last_used = ++use_clock_;
    return it->second.get();
  }
  if (sockets_.size() >= options_.max_source_ports + 1) EvictLeastRecentlyUsed();
  absl::StatusOr<Socket*> socket = OpenSocket(src_port);
  return socket.ok() ? *socket : nullptr;
}

void UdpPort::EvictLeastRecentlyUsed() {
  auto victim = sockets_.end();
  for (auto it = sockets_.begin(); it != sockets_.end(); ++it) {
    if (it->second.get() == port_socket_) continue;
    if (victim == sockets_.end() || it->second->last_used < victim->second->last_used) victim = it;
  }
  if (victim == sockets_.end()) return;
  std::unique_ptr<Socket> socket = std::move(victim->second);
  sockets_.erase(victim);
  socket->closing = true;
  if (ring_) {
    for (auto& slot : rx_slots_) {
      if (slot->posted && slot->owner == socket.get()) {
        io_uring_sqe* sqe = NextSqe();
        io_uring_prep_cancel64(sqe, UserData(kKindReceive, slot->index), 0);
        io_uring_sqe_set_data64(sqe, UserData(kKindCancel, 0));
      }
    }
    // Submit now: queued SQEs name the fd by number, which must stay open until they are issued.
    io_uring_submit(ring_.get());
    unsubmitted_ = 0;
  } else {
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, socket->fd, nullptr);
  }
  if (socket->references == 0) {
    close(socket->fd);
    return;
  }
  closing_sockets_.push_back(std::move(socket));
}

void UdpPort::DropSocketReference(Socket* socket) {
  if (socket == nullptr) return;
  --socket->references;
  if (!socket->closing || socket->references > 0) return;
  close(socket->fd);
  std::erase_if(closing_sockets_, [socket](const auto& s) { return s.get() == socket; });
}

UdpPort::Slot* UdpPort::TakeReceiveSlot(Socket* owner) {
  Slot* slot;
  if (!free_rx_slots_.empty()) {
    slot = rx_slots_[free_rx_slots_.back()].get();
    free_rx_slots_.pop_back();
  } else {
    auto fresh = std::make_unique<Slot>();
    fresh->index = static_cast<uint32_t>(rx_slots_.size());
    fresh->data = std::make_unique<std::byte[]>(options_.buffer_bytes);
    slot = fresh.get();
    rx_slots_.push_back(std::move(fresh));
  }
  slot->owner = owner;
  ++owner->references;
  return slot;
}

void UdpPort::PrepareMessage(Slot* slot, bool for_send) {
  slot->iov.iov_base = slot->data.get();
  slot->iov.iov_len = for_send ? slot->length : options_.buffer_bytes;
  slot->msg = msghdr{};
  slot->msg.msg_name = &slot->peer;
  slot->msg.msg_namelen = sizeof slot->peer;
  slot->msg.msg_iov = &slot->iov;
  slot->msg.msg_iovlen = 1;
  slot->msg.msg_control = slot->control;
  slot->msg.msg_controllen = sizeof slot->control;
}

io_uring_sqe* UdpPort::NextSqe() {
  io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
  if (sqe == nullptr) {
    io_uring_submit(ring_.get());
    unsubmitted_ = 0;
    sqe = io_uring_get_sqe(ring_.get());  // the submit emptied the SQ
  }
  ++unsubmitted_;
  return sqe;
}

void UdpPort::PostReceive(Slot* slot) {
  PrepareMessage(slot, false);
  io_uring_sqe* sqe = NextSqe();
  io_uring_prep_recvmsg(sqe, slot->owner->fd, &slot->msg, 0);
  io_uring_sqe_set_data64(sqe, UserData(kKindReceive, slot->index));
  slot->posted = true;
}

void UdpPort::ReturnReceiveSlot(Slot* slot) {
  if (ring_ && slot->owner != nullptr && !slot->owner->closing) {
    PostReceive(slot);
    return;
  }
  DropSocketReference(slot->owner);
  slot->owner = nullptr;
  free_rx_slots_.push_back(slot->index);
}

void UdpPort::ReapCompletions() {
  io_uring_cqe* cqe;
  unsigned head;
  unsigned seen = 0;
  io_uring_for_each_cqe(ring_.get(), head, cqe) {
    ++seen;
    const uint64_t kind = cqe->user_data >> kKindShift;
    const uint32_t index = static_cast<uint32_t>(cqe->user_data & ((1ull << kKindShift) - 1));
    if (kind == kKindReceive) {
      Slot* slot = rx_slots_[index].get();
      slot->posted = false;
      if (cqe->res >= 0 && (slot->msg.msg_flags & MSG_TRUNC) == 0 && !slot->owner->closing) {
        slot->length = static_cast<uint32_t>(cqe->res);
        ready_rx_slots_.push_back(index);
      } else {
        if (cqe->res >= 0 || cqe->res != -ECANCELED) ++stats_.rx_dropped;
        ReturnReceiveSlot(slot);
      }
    } else if (kind == kKindSend) {
      Slot* slot = tx_slots_[index].get();
      if (cqe->res < 0) ++stats_.tx_unroutable;
      DropSocketReference(slot->owner);
      slot->owner = nullptr;
      free_tx_slots_.push_back(index);
    }
  }
  io_uring_cq_advance(ring_.get(), seen);
}

bool UdpPort::Send(const TxPacket& packet) {
  const size_t size = packet.headers.size() + packet.payload.size();
  if (packet.dst.v6 != options_.local_ip.v6 || size > options_.buffer_bytes) {
    ++stats_.tx_unroutable;
    return true;
  }
  if (free_tx_slots_.empty() && ring_) ReapCompletions();
  if (free_tx_slots_.empty()) {
    ++stats_.tx_ring_full;
    return false;
  }
  Socket* socket = SocketFor(packet.src_port);
  if (socket == nullptr) {
    ++stats_.tx_unroutable;  // e.g. the source port is taken by another process
    return true;
  }
  Slot* slot = tx_slots_[free_tx_slots_.back()].get();
  free_tx_slots_.pop_back();
  if (!packet.headers.empty()) {
    std::memcpy(slot->data.get(), packet.headers.data(), packet.headers.size());
  }
  if (!packet.payload.empty()) {
    std::memcpy(slot->data.get() + packet.headers.size(), packet.payload.data(),
                packet.payload.size());
  }
  slot->length = static_cast<uint32_t>(size);
  slot->owner = socket;
  ++socket->references;
  PrepareMessage(slot, true);
  socklen_t name_length;
  FillSockaddr(packet.dst, packet.dst_port, &slot->peer, &name_length);
  slot->msg.msg_namelen = name_length;
  // Per-datagram ECN codepoint (the socket default is ECT(0)).
  slot->msg.msg_controllen = CMSG_SPACE(sizeof(int));
  cmsghdr* c = CMSG_FIRSTHDR(&slot->msg);
  c->cmsg_level = packet.dst.v6 ? IPPROTO_IPV6 : IPPROTO_IP;
  c->cmsg_type = packet.dst.v6 ? IPV6_TCLASS : IP_TOS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  slot->tos = packet.ect ? kEct0 : 0;
  std::memcpy(CMSG_DATA(c), &slot->tos, sizeof slot->tos);

  if (ring_) {
    io_uring_sqe* sqe = NextSqe();
    io_uring_prep_sendmsg(sqe, socket->fd, &slot->msg, 0);
    io_uring_sqe_set_data64(sqe, UserData(kKindSend, slot->index));
  } else {
    if (socket->queued.empty()) sockets_with_queued_.push_back(socket);
    socket->queued.push_back(slot->index);
  }
  ++stats_.tx_packets;
  stats_.tx_bytes += size;
  return true;
}

void UdpPort::Flush() {
  if (!ring_) {
    FlushFallback();
    return;
  }
  if (unsubmitted_ > 0) {
    io_uring_submit(ring_.get());
    unsubmitted_ = 0;
  }
  ReapCompletions();
}

size_t UdpPort::SegmentRun(const std::vector<uint32_t>& queued, size_t first) const {
  if (!segmentation_) return 1;
  const Slot& head = *tx_slots_[queued[first]];
  return SegmentRunLength(
      first, queued.size(), [&](size_t i) { return tx_slots_[queued[i]]->length; },
      [&](size_t i) {
        const Slot& s = *tx_slots_[queued[i]];
        return s.tos == head.tos && SamePeer(s.msg, head.msg);
      });
}

void UdpPort::SendEach(Socket* socket, const std::vector<uint32_t>& queued, size_t first,
                       size_t count) {
  for (size_t k = 0; k < count; ++k) {
    while (sendmsg(socket->fd, &tx_slots_[queued[first + k]]->msg, 0) < 0) {
      if (errno == EINTR) continue;
      ++stats_.tx_unroutable;
      break;
    }
  }
}

void UdpPort::FlushFallback() {
  // One sendmmsg per source socket: Send() queues each datagram on its socket (the paths take
  // turns, so in posting order hardly two consecutive datagrams share one: a system call each).
  // A path's datagrams keep their order. With segmentation, a run of datagrams of one socket to
  // one peer with one ECN codepoint and one size (the last may be shorter) leaves as one message
  // with UDP_SEGMENT: the kernel walks its UDP and IP layers once for the run and cuts it into
  // the same datagrams after them (in software where the device cannot: veth).
  mmsghdr batch[kMaxBatch];
  SegmentControl controls[kMaxBatch];
  size_t first_of[kMaxBatch];
  size_t run_of[kMaxBatch];
  for (Socket* socket : sockets_with_queued_) {
    ++socket->references;  // an evicted socket outlives its slots' references until the end
    const std::vector<uint32_t>& queued = socket->queued;
    size_t next = 0;
    while (next < queued.size()) {
      size_t n = 0;
      size_t iovs_used = 0;
      for (; n < kMaxBatch && next < queued.size(); ++n) {
        const size_t run = SegmentRun(queued, next);
        const Slot& head = *tx_slots_[queued[next]];
        msghdr& m = batch[n].msg_hdr;
        m = head.msg;
        batch[n].msg_len = 0;
        first_of[n] = next;
        run_of[n] = run;
        if (run > 1) {
          iovec* iov = &segment_iovs_[iovs_used];
          for (size_t k = 0; k < run; ++k) iov[k] = tx_slots_[queued[next + k]]->iov;
          iovs_used += run;
          m.msg_iov = iov;
          m.msg_iovlen = run;
          m.msg_control = controls[n].bytes;
          m.msg_controllen = sizeof controls[n].bytes;
          cmsghdr* c = CMSG_FIRSTHDR(&m);
          std::memcpy(c, head.control, CMSG_SPACE(sizeof(int)));  // the ECN codepoint's
          WriteSegmentSize(CMSG_NXTHDR(&m, c), static_cast<uint16_t>(head.length));
        }
        next += run;
      }
      size_t done = 0;
      while (done < n) {
        // Blocking: a full socket buffer waits, as the io_uring path does.
        const int sent = sendmmsg(socket->fd, batch + done, static_cast<unsigned>(n - done), 0);
        if (sent >= 0) {
          stats_.tx_segmented_messages += static_cast<uint64_t>(std::count_if(
              run_of + done, run_of + done + sent, [](size_t r) { return r > 1; }));
          done += static_cast<size_t>(sent);
          continue;
        }
        if (errno == EINTR) continue;
        if (run_of[done] > 1 && (errno == EIO || errno == EINVAL || errno == EOPNOTSUPP)) {
          // The kernel or the route refuses segmentation (no checksum offload before Linux
          // 5.x, an IPsec route...): the run leaves datagram by datagram, and so does every
          // later run.
          segmentation_ = false;
          segmentation_off_ = absl::StrCat("UDP_SEGMENT refused: ", std::strerror(errno));
          SendEach(socket, queued, first_of[done], run_of[done]);
        } else {
          stats_.tx_unroutable += run_of[done];  // ENETUNREACH, EPERM...: this message fails
        }
        ++done;
      }
    }
    for (uint32_t index : queued) {
      Slot* slot = tx_slots_[index].get();
      DropSocketReference(slot->owner);
      slot->owner = nullptr;
      free_tx_slots_.push_back(index);
    }
    socket->queued.clear();  // its buffer stays for the next flush
    DropSocketReference(socket);
  }
  sockets_with_queued_.clear();
}

void UdpPort::ReceiveFallback() {
  epoll_event events[kMaxBatch];
  const int ready = epoll_wait(epoll_fd_, events, kMaxBatch, 0);
  for (int e = 0; e < ready; ++e) {
    Socket* socket = static_cast<Socket*>(events[e].data.ptr);
    Slot* slots[kMaxBatch];
    mmsghdr batch[kMaxBatch];
    const size_t n = 32;
    for (size_t k = 0; k < n; ++k) {
      slots[k] = TakeReceiveSlot(socket);
      PrepareMessage(slots[k], false);
      batch[k].msg_hdr = slots[k]->msg;
      batch[k].msg_len = 0;
    }
    const int got = recvmmsg(socket->fd, batch, static_cast<unsigned>(n), MSG_DONTWAIT, nullptr);
    for (size_t k = 0; k < n; ++k) {
      Slot* slot = slots[k];
      if (got > 0 && k < static_cast<size_t>(got)) {
        slot->msg = batch[k].msg_hdr;  // controllen and flags as the kernel left them
        if ((slot->msg.msg_flags & MSG_TRUNC) == 0) {
          slot->length = batch[k].msg_len;
          ready_rx_slots_.push_back(slot->index);
          continue;
        }
        ++stats_.rx_dropped;
      }
      ReturnReceiveSlot(slot);
    }
  }
}

size_t UdpPort::Receive(std::span<RxPacket> out) {
  auto collect = [&] {
    if (ring_) {
      ReapCompletions();
    } else {
      ReceiveFallback();
    }
  };
  if (ready_rx_slots_.size() < out.size()) collect();
  if (ready_rx_slots_.empty() && ring_) {
    // Reset the eventfd before looking once more, so a completion racing with us re-arms it.
    uint64_t counter;
    [[maybe_unused]] ssize_t r = read(wait_fd_, &counter, sizeof counter);
    collect();
  }
  size_t n = 0;
  while (n < out.size() && !ready_rx_slots_.empty()) {
    Slot* slot = rx_slots_[ready_rx_slots_.front()].get();
    ready_rx_slots_.pop_front();
    RxPacket& p = out[n++];
    p.payload = std::span<const std::byte>(slot->data.get(), slot->length);
    ReadSockaddr(slot->peer, &p.src, &p.src_port);
    p.dst_port = slot->owner->port;
    p.ce = CongestionExperienced(slot->msg);
    p.cookie = slot->index;
    ++stats_.rx_packets;
    stats_.rx_bytes += slot->length;
  }
  if (ring_ && unsubmitted_ > 0) {
    io_uring_submit(ring_.get());
    unsubmitted_ = 0;
  }
  return n;
}

void UdpPort::Release(std::span<const RxPacket> packets) {
  for (const RxPacket& p : packets) {
    if (p.cookie < rx_slots_.size()) ReturnReceiveSlot(rx_slots_[p.cookie].get());
  }
  if (ring_ && unsubmitted_ > 0) {
    io_uring_submit(ring_.get());
    unsubmitted_ = 0;
  }
}

std::string UdpPort::description() const {
  std::string where = options_.local_ip.v6
                          ? absl::StrCat("[", options_.local_ip.ToString(), "]:", options_.udp_port)
                          : absl::StrCat(options_.local_ip.ToString(), ":", options_.udp_port);
  if (ring_) return absl::StrCat("udp io_uring ", where);
  std::string notes = fallback_reason_;
  if (!segmentation_off_.empty()) {
    absl::StrAppend(&notes, notes.empty() ? "" : "; ", segmentation_off_);
  }
  return absl::StrCat("udp sendmmsg", segmentation_ ? "+gso" : "", "/recvmmsg ", where,
                      notes.empty() ? "" : absl::StrCat(" (", notes, ")"));
}

}  // namespace metaroce::io
