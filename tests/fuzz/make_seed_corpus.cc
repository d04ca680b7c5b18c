// Writes the seed corpus of the binary fuzz targets: valid packets of every opcode (and a few
// invalid ones) for parse_fuzzer, short conversations for connection_fuzzer, and set-up
// messages of every kind for exchange_fuzzer. The files in tests/fuzz/corpus/{parse,connection,
// exchange} were made with it (the text targets' seeds are written by hand):
//
//   build/tests/fuzz/make_seed_corpus tests/fuzz/corpus
//
// Seeds are deterministic, so running it again changes nothing unless this file changed.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "lib/api/exchange.h"
#include "lib/wire/packet.h"
#include "tests/fuzz/connection_fuzz_input.h"

namespace metaroce::fuzz {
namespace {

namespace fs = std::filesystem;
using wire::Opcode;
using wire::Packet;

std::vector<uint8_t> Encode(const Packet& p, size_t payload_len) {
  std::vector<uint8_t> payload(payload_len);
  for (size_t i = 0; i < payload_len; ++i) payload[i] = static_cast<uint8_t>(i);
  Packet q = p;
  q.payload = std::as_bytes(std::span(payload));
  std::vector<std::byte> out(wire::kMaxHeadersSize);
  out.resize(wire::SerializeHeaders(q, out));
  out.insert(out.end(), q.payload.begin(), q.payload.end());
  std::vector<uint8_t> bytes(out.size());
  for (size_t i = 0; i < out.size(); ++i) bytes[i] = static_cast<uint8_t>(out[i]);
  return bytes;
}

Packet Base(Opcode op, uint16_t path, uint32_t psn) {
  Packet p;
  p.opcode = op;
  p.dest_conn = kLocalConnId;
  p.token = kRxToken;
  p.path_id = path;
  p.psn = psn;
  return p;
}

// A data packet; for Writes, remote_addr is the offset into the fuzzer's receive region (the
// fuzzer's kPatchWriteTarget turns it into an address there).
Packet Data(Opcode op, uint16_t path, uint32_t psn, uint32_t msg_seq, uint32_t msg_len,
            uint32_t offset, uint32_t recv_seq) {
  Packet p = Base(op, path, psn);
  p.data.msg_seq = msg_seq;
  p.data.msg_len = msg_len;
  p.data.offset = offset;
  p.data.recv_seq = recv_seq;
  if (wire::IsWrite(op)) p.data.remote_addr = 32 * 1024 + offset;
  if (wire::CarriesImm(op)) p.data.imm = 0x11223344;
  if (op == Opcode::kWrite) p.data.recv_seq = 0;
  return p;
}

Packet Ack(uint16_t path, uint32_t cum_psn, uint32_t ack_psn,
           wire::Syndrome syndrome = wire::Syndrome::kAck) {
  Packet p = Base(Opcode::kAck, path, 0);
  p.ack.cum_psn = cum_psn;
  p.ack.ack_psn = ack_psn;
  p.ack.syndrome = syndrome;
  if (syndrome == wire::Syndrome::kRnrNak) p.ack.rnr_delay_us = 20;
  return p;
}

void Write(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void ParseSeeds(const fs::path& dir) {
  Write(dir / "write.bin", Encode(Data(Opcode::kWrite, 1, 5, 2, 4096, 1024, 0), 64));
  Write(dir / "write_imm.bin", Encode(Data(Opcode::kWriteImm, 0, 0, 0, 16, 0, 3), 16));
  Write(dir / "send.bin", Encode(Data(Opcode::kSend, 2, 9, 1, 100, 90, 1), 10));
  Write(dir / "send_imm.bin", Encode(Data(Opcode::kSendImm, 3, 1, 4, 0, 0, 2), 0));
  Packet ack = Ack(3, 100, 104, wire::Syndrome::kAck);
  ack.ack.sack.Set(0);
  ack.ack.sack.Set(3);
  ack.ack.sack.Set(255);
  ack.ack.ce_count = 5;
  ack.ack.window_hint = 65536;
  Write(dir / "ack_sack.bin", Encode(ack, 0));
  Write(dir / "nak_rnr.bin", Encode(Ack(0, 7, 7, wire::Syndrome::kRnrNak), 0));
  Write(dir / "probe.bin", Encode(Base(Opcode::kProbe, 1, 42), 0));
  std::vector<uint8_t> truncated = Encode(Data(Opcode::kSend, 0, 0, 0, 64, 0, 0), 8);
  truncated.resize(40);
  Write(dir / "truncated.bin", truncated);
  std::vector<uint8_t> bad_version = Encode(Base(Opcode::kProbe, 0, 0), 0);
  bad_version[0] = 2;
  Write(dir / "bad_version.bin", bad_version);
}

void ConnectionSeeds(const fs::path& dir) {
  const char* kProfiles[] = {"metaroce", "gbn", "reorder"};
  for (uint8_t profile = 0; profile < 3; ++profile) {
    const std::string name = kProfiles[profile];

    // Nothing received: the connection sends, times out, probes and eventually gives up.
    ConnectionFuzzInput idle(kPatchAll, profile, 4);
    idle.Advance(60000);
    Write(dir / (name + "_idle.bin"), idle.bytes());

    // The peer acknowledges our first packets, with a gap on path 0, an RNR NAK and a probe.
    ConnectionFuzzInput acks(kPatchAll, profile, 4);
    acks.Datagram(Encode(Ack(0, 1, 0), 0));
    Packet sack = Ack(1, 0, 2);
    sack.ack.sack.Set(1);
    acks.Datagram(Encode(sack, 0));
    acks.Advance(50);
    acks.Datagram(Encode(Ack(2, 0, 0, wire::Syndrome::kRnrNak), 0));
    acks.Datagram(Encode(Ack(3, 1, 0), 0), /*ce=*/true);
    acks.Datagram(Encode(Base(Opcode::kProbe, 2, 0), 0));
    acks.Advance(2000);
    acks.Datagram(Encode(Ack(0, 4, 3), 0));
    acks.Datagram(Encode(Ack(1, 0, 0, wire::Syndrome::kRemoteAccessNak), 0));
    Write(dir / (name + "_acks.bin"), acks.bytes());

    // The peer acknowledges everything, path by path, in rounds: our requests complete.
    ConnectionFuzzInput complete(kPatchAll, profile, 4);
    for (uint32_t round = 1; round <= 20; ++round) {
      for (uint16_t path = 0; path < 4; ++path) {
        complete.Datagram(Encode(Ack(path, round, round - 1), 0));
      }
      complete.Advance(20);
    }
    Write(dir / (name + "_complete.bin"), complete.bytes());

    // The peer sends us a two-packet Write (out of order), a Send into receive 0, a
    // Write-with-immediate into receive 1, a duplicate, and a Write out of bounds.
    ConnectionFuzzInput data(kPatchAll, profile, 2);
    data.Datagram(Encode(Data(Opcode::kWrite, 1, 0, 0, 2048, 1024, 0), 1024));
    data.Datagram(Encode(Data(Opcode::kWrite, 0, 0, 0, 2048, 0, 0), 1024));
    data.Datagram(Encode(Data(Opcode::kSend, 0, 1, 1, 1500, 0, 0), 1024));
    data.Advance(10);
    data.Datagram(Encode(Data(Opcode::kSend, 1, 1, 1, 1500, 1024, 0), 476));
    data.Datagram(Encode(Data(Opcode::kWriteImm, 0, 2, 2, 8, 0, 1), 8), /*ce=*/true);
    data.Datagram(Encode(Data(Opcode::kWriteImm, 0, 2, 2, 8, 0, 1), 8));
    data.Datagram(Encode(Data(Opcode::kWrite, 1, 2, 3, 1024, 0, 0), 0));
    Packet oob = Data(Opcode::kWrite, 0, 3, 4, 1024, 0, 0);
    oob.data.remote_addr = 64 * 1024 - 100;  // runs 924 bytes past the region's end
    data.Datagram(Encode(oob, 1024));
    data.Advance(100);
    data.Post(4, 0, 4096);
    data.Datagram(Encode(Data(Opcode::kSendImm, 1, 3, 5, 10, 0, 4), 10));
    data.Advance(1000);
    Write(dir / (name + "_data.bin"), data.bytes());

    // Both directions with more posts, some of them refused (out of the source region).
    ConnectionFuzzInput mixed(kPatchAll, profile, 8);
    mixed.Post(0, 0, 8192);
    mixed.Post(3, 100, 10);
    mixed.Post(2, 65000, 4096);
    mixed.Datagram(Encode(Ack(0, 2, 1), 0));
    mixed.Datagram(Encode(Data(Opcode::kWrite, 5, 0, 0, 100, 0, 0), 100));
    mixed.Advance(300);
    mixed.Datagram(Encode(Ack(5, 1, 0), 0));
    mixed.Advance(65535);
    Write(dir / (name + "_mixed.bin"), mixed.bytes());
  }
  // Unpatched: the token check must refuse everything.
  ConnectionFuzzInput raw(0, 0, 1);
  Packet wrong = Base(Opcode::kProbe, 0, 0);
  wrong.token = 1;
  raw.Datagram(Encode(wrong, 0));
  raw.Datagram({0x01, 0x10});
  Write(dir / "unpatched.bin", raw.bytes());
}

std::vector<uint8_t> Bytes(const std::vector<std::byte>& body) {
  std::vector<uint8_t> out(body.size());
  for (size_t i = 0; i < body.size(); ++i) out[i] = static_cast<uint8_t>(body[i]);
  return out;
}

// Set-up messages (lib/api/exchange.h): a request and a reply for each transport profile, IPv4
// and IPv6 planes, private data, a confirm and a reject.
void ExchangeSeeds(const fs::path& dir) {
  const std::pair<const char*, core::TransportProfile> profiles[] = {
      {"metaroce", core::TransportProfile::MetaRoce()},
      {"gbn", core::TransportProfile::GoBackN()},
      {"reorder", core::TransportProfile::ReorderBuffer(64 * 1024)}};
  for (const auto& [name, profile] : profiles) {
    api::ExchangeMessage m;
    m.kind = api::ExchangeKind::kRequest;
    api::ConnectionParameters& p = m.params;
    p.conn_id = 7;
    p.token = 0x0123456789abcdefull;
    p.profile = profile;
    p.path_count = profile.spray == core::SprayPolicy::kSinglePath ? 1 : 4;
    for (uint16_t i = 0; i < p.path_count; ++i) p.initial_ports.push_back(50000 + i);
    io::IpAddress v4;
    v4.bytes[0] = 198;
    v4.bytes[1] = 18;
    v4.bytes[3] = 1;
    p.plane_addresses.push_back(v4);
    p.mtu = 4096;
    p.max_send_queue = 256;
    p.max_recv_queue = 256;
    p.udp_port = 4792;
    Write(dir / (std::string(name) + "_request.bin"), Bytes(api::EncodeExchange(m)));
    m.kind = api::ExchangeKind::kReply;
    io::IpAddress v6;
    v6.v6 = true;
    v6.bytes[0] = 0xfd;
    v6.bytes[15] = 2;
    p.plane_addresses.push_back(v6);
    p.ordered_completion = true;
    p.private_data = {std::byte{1}, std::byte{2}, std::byte{3}};
    Write(dir / (std::string(name) + "_reply.bin"), Bytes(api::EncodeExchange(m)));
  }
  api::ExchangeMessage confirm;
  confirm.kind = api::ExchangeKind::kConfirm;
  Write(dir / "confirm.bin", Bytes(api::EncodeExchange(confirm)));
  api::ExchangeMessage reject;
  reject.kind = api::ExchangeKind::kReject;
  reject.reason = "path counts differ: this side 4, the peer 8";
  Write(dir / "reject.bin", Bytes(api::EncodeExchange(reject)));
}

}  // namespace
}  // namespace metaroce::fuzz

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR   (e.g. tests/fuzz/corpus)\n", argv[0]);
    return 2;
  }
  const fs::path root(argv[1]);
  fs::create_directories(root / "parse");
  fs::create_directories(root / "connection");
  fs::create_directories(root / "exchange");
  metaroce::fuzz::ParseSeeds(root / "parse");
  metaroce::fuzz::ConnectionSeeds(root / "connection");
  metaroce::fuzz::ExchangeSeeds(root / "exchange");
  std::printf("seed corpus written to %s/{parse,connection,exchange}\n", root.c_str());
  return 0;
}
