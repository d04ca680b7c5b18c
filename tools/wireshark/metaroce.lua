-- metaroce.lua: Wireshark/tshark dissector for the MetaRoCE v1 wire format.
--
-- The normative format is docs/spec/wire-format.md (implemented by lib/wire/packet.h). A MetaRoCE
-- packet is the whole payload of one UDP datagram sent to the MetaRoCE port (default 4792):
--
--   BaseHeader (24) | DataHeader (32) | payload     WRITE 0x01, WRITE_IMM 0x02, SEND 0x03, SEND_IMM 0x04
--   BaseHeader (24) | AckHeader  (56)               ACK 0x10 (ACKs, NAKs, probe replies)
--   BaseHeader (24)                                 PROBE 0x11
--
-- Every field of every header is shown (filter names metaroce.base.*, metaroce.data.*,
-- metaroce.ack.*), the flags as a bitfield, the SACK bitmap both as its 32 bytes and decoded
-- (metaroce.ack.sack.count, one metaroce.ack.sack.psn per acknowledged PSN, and
-- metaroce.ack.sack.ranges). The parser's validity checks (spec section 9, checks 1-8) become
-- expert infos (metaroce.expert.*): truncated, bad version, bad opcode, length mismatch, bad range
-- and bad syndrome are PI_MALFORMED errors; reserved flag bits that are set (bits 10-15) are a
-- PI_PROTOCOL warning. The dissector never reads outside the captured bytes, so a malformed or
-- truncated packet is flagged, not thrown on.
--
-- Usage:
--   tshark -X lua_script:tools/wireshark/metaroce.lua -r cap.pcap -V
--   tshark -X lua_script:tools/wireshark/metaroce.lua -r cap.pcap -Y 'metaroce.ack.sack.count > 0'
--   or copy this file to ~/.local/lib/wireshark/plugins/ (Wireshark 4.0 and later) to load it
--   always. Another UDP port: Preferences > Protocols > MetaRoCE > UDP port, or on the command line
--   `-o metaroce.udp_port:5000`; "Decode As... > MetaRoCE" also works.
--
-- Tested by tests/wireshark/dissector_test.py (real traffic from mrperf on a namespace fabric,
-- compared field by field with an independent Python parser, plus crafted malformed packets).

local VERSION = 1
local DEFAULT_PORT = 4792
local BASE_LEN = 24
local DATA_LEN = 32
local ACK_LEN = 56
local SACK_BITS = 256

local metaroce = Proto("metaroce", "MetaRoCE v1")

local opcode_names = {
  [0x01] = "WRITE",
  [0x02] = "WRITE_IMM",
  [0x03] = "SEND",
  [0x04] = "SEND_IMM",
  [0x10] = "ACK",
  [0x11] = "PROBE",
}

local syndrome_names = {
  [0] = "ACK",
  [1] = "RNR_NAK",
  [2] = "SEQ_ERR_NAK",
  [3] = "REM_ACCESS_NAK",
  [4] = "INV_REQ_NAK",
  [5] = "REM_OP_NAK",
}

-- BaseHeader.flags (spec section 6): mask, filter suffix, name.
local FLAG_ACK_REQ = 0x0001
local FLAG_RETRANSMIT = 0x0002
local FLAG_FILLER = 0x0004
local FLAG_WANTS_PULL = 0x0008
local FLAG_DELAYED_ACK = 0x0010
local FLAG_PROBE_REPLY = 0x0020
local FLAG_PULLED = 0x0040
local FLAG_PULL = 0x0080
local FLAG_PULLING = 0x0100
local FLAG_CNP = 0x0200  -- go-back-N with DCQCN (baselines.md [B3])
local FLAG_RESERVED = 0xfc00  -- bits 10-15
local flag_list = {
  { FLAG_ACK_REQ, "ACK_REQ" },
  { FLAG_RETRANSMIT, "RETRANSMIT" },
  { FLAG_FILLER, "FILLER" },
  { FLAG_WANTS_PULL, "WANTS_PULL" },
  { FLAG_DELAYED_ACK, "DELAYED_ACK" },
  { FLAG_PROBE_REPLY, "PROBE_REPLY" },
  { FLAG_PULLED, "PULLED" },
  { FLAG_PULL, "PULL" },
  { FLAG_PULLING, "PULLING" },
  { FLAG_CNP, "CNP" },
}

local f = {
  -- BaseHeader (24 bytes, every packet)
  version = ProtoField.uint8("metaroce.base.version", "Version", base.DEC),
  opcode = ProtoField.uint8("metaroce.base.opcode", "Opcode", base.HEX, opcode_names),
  flags = ProtoField.uint16("metaroce.base.flags", "Flags", base.HEX),
  flag_ack_req = ProtoField.bool("metaroce.base.flags.ack_req", "ACK_REQ (acknowledge at once)",
                                 16, nil, FLAG_ACK_REQ),
  flag_retransmit = ProtoField.bool("metaroce.base.flags.retransmit",
                                    "RETRANSMIT (sent before)", 16, nil, FLAG_RETRANSMIT),
  flag_filler = ProtoField.bool("metaroce.base.flags.filler", "FILLER (fills a PSN, no data)",
                                16, nil, FLAG_FILLER),
  flag_wants_pull = ProtoField.bool("metaroce.base.flags.wants_pull",
                                    "WANTS_PULL (more data waiting, asks for a pull)", 16, nil,
                                    FLAG_WANTS_PULL),
  flag_delayed_ack = ProtoField.bool("metaroce.base.flags.delayed_ack",
                                     "DELAYED_ACK (delayed-ACK timer, no RTT sample)", 16, nil,
                                     FLAG_DELAYED_ACK),
  flag_probe_reply = ProtoField.bool("metaroce.base.flags.probe_reply",
                                     "PROBE_REPLY (answers the PROBE ack_psn)", 16, nil,
                                     FLAG_PROBE_REPLY),
  flag_pulled = ProtoField.bool("metaroce.base.flags.pulled", "PULLED (sent on a pull)", 16, nil,
                                FLAG_PULLED),
  flag_pull = ProtoField.bool("metaroce.base.flags.pull",
                              "PULL (grants one more new data packet)", 16, nil, FLAG_PULL),
  flag_pulling = ProtoField.bool("metaroce.base.flags.pulling",
                                 "PULLING (the responder pulls: paced requesters send on pulls)", 16,
                                 nil, FLAG_PULLING),
  flag_cnp = ProtoField.bool("metaroce.base.flags.cnp",
                             "CNP (congestion notification: DCQCN, go-back-N profile)", 16, nil,
                             FLAG_CNP),
  -- flags & 0xfc00, unshifted (a masked field would be shifted down by 10 bits).
  flag_reserved = ProtoField.uint16("metaroce.base.flags.reserved", "Reserved bits (mask 0xfc00)",
                                    base.HEX),
  dest_conn = ProtoField.uint32("metaroce.base.dest_conn", "Destination connection", base.DEC),
  path_id = ProtoField.uint16("metaroce.base.path_id", "Path ID", base.DEC),
  payload_len = ProtoField.uint16("metaroce.base.payload_len", "Payload length", base.DEC),
  psn = ProtoField.uint32("metaroce.base.psn", "PSN", base.DEC),
  token = ProtoField.uint64("metaroce.base.token", "Token", base.HEX),

  -- DataHeader (32 bytes, data packets)
  msg_seq = ProtoField.uint32("metaroce.data.msg_seq", "Message sequence", base.DEC),
  msg_len = ProtoField.uint32("metaroce.data.msg_len", "Message length", base.DEC),
  offset = ProtoField.uint32("metaroce.data.offset", "Offset", base.DEC),
  rkey = ProtoField.uint32("metaroce.data.rkey", "Remote key", base.HEX),
  remote_addr = ProtoField.uint64("metaroce.data.remote_addr", "Remote address", base.HEX),
  recv_seq = ProtoField.uint32("metaroce.data.recv_seq", "Receive sequence", base.DEC),
  imm = ProtoField.uint32("metaroce.data.imm", "Immediate", base.HEX),
  payload = ProtoField.bytes("metaroce.payload", "Payload"),

  -- AckHeader (56 bytes, ACK)
  cum_psn = ProtoField.uint32("metaroce.ack.cum_psn", "Cumulative PSN (next expected)", base.DEC),
  ack_psn = ProtoField.uint32("metaroce.ack.ack_psn", "Acknowledged PSN (trigger)", base.DEC),
  ce_count = ProtoField.uint32("metaroce.ack.ce_count", "CE count", base.DEC),
  window_hint = ProtoField.uint32("metaroce.ack.window_hint", "Window hint (bytes)", base.DEC),
  syndrome = ProtoField.uint8("metaroce.ack.syndrome", "Syndrome", base.DEC, syndrome_names),
  pull_seq = ProtoField.uint8("metaroce.ack.pull_seq", "Pulls granted (mod 256)", base.DEC),
  rnr_delay_us = ProtoField.uint16("metaroce.ack.rnr_delay_us", "RNR delay (us)", base.DEC),
  ack_msg_seq = ProtoField.uint32("metaroce.ack.msg_seq", "Message sequence (NAK)", base.DEC),
  sack = ProtoField.bytes("metaroce.ack.sack", "SACK bitmap"),
  sack_count = ProtoField.uint16("metaroce.ack.sack.count", "SACKed PSNs", base.DEC),
  sack_psn = ProtoField.uint32("metaroce.ack.sack.psn", "SACKed PSN", base.DEC),
  sack_ranges = ProtoField.string("metaroce.ack.sack.ranges", "SACKed PSN ranges"),
}
metaroce.fields = {
  f.version, f.opcode, f.flags, f.flag_ack_req, f.flag_retransmit, f.flag_filler,
  f.flag_wants_pull, f.flag_delayed_ack, f.flag_probe_reply, f.flag_pulled, f.flag_pull, f.flag_pulling,
  f.flag_cnp, f.flag_reserved, f.dest_conn, f.path_id, f.payload_len, f.psn, f.token,
  f.msg_seq, f.msg_len, f.offset, f.rkey, f.remote_addr, f.recv_seq, f.imm, f.payload,
  f.cum_psn, f.ack_psn, f.ce_count, f.window_hint, f.syndrome, f.pull_seq, f.rnr_delay_us,
  f.ack_msg_seq, f.sack, f.sack_count, f.sack_psn, f.sack_ranges,
}

-- Expert infos: the parser's refusal reasons (spec section 9) and the reserved-flags warning.
local e = {
  truncated = ProtoExpert.new("metaroce.expert.truncated", "Truncated MetaRoCE packet",
                              expert.group.MALFORMED, expert.severity.ERROR),
  bad_version = ProtoExpert.new("metaroce.expert.bad_version", "Unsupported MetaRoCE version",
                                expert.group.MALFORMED, expert.severity.ERROR),
  bad_opcode = ProtoExpert.new("metaroce.expert.bad_opcode", "Unknown MetaRoCE opcode",
                               expert.group.MALFORMED, expert.severity.ERROR),
  length_mismatch = ProtoExpert.new("metaroce.expert.length_mismatch",
                                    "payload_len disagrees with the datagram length",
                                    expert.group.MALFORMED, expert.severity.ERROR),
  bad_range = ProtoExpert.new("metaroce.expert.bad_range", "offset + payload_len exceeds msg_len",
                              expert.group.MALFORMED, expert.severity.ERROR),
  bad_syndrome = ProtoExpert.new("metaroce.expert.bad_syndrome", "Unknown ACK syndrome",
                                 expert.group.MALFORMED, expert.severity.ERROR),
  reserved = ProtoExpert.new("metaroce.expert.reserved_nonzero", "Reserved field is not zero",
                             expert.group.PROTOCOL, expert.severity.WARN),
  snapped = ProtoExpert.new("metaroce.expert.snapped", "Packet cut short by the capture length",
                            expert.group.UNDECODED, expert.severity.NOTE),
}
metaroce.experts = {
  e.truncated, e.bad_version, e.bad_opcode, e.length_mismatch, e.bad_range, e.bad_syndrome,
  e.reserved, e.snapped,
}

metaroce.prefs.udp_port = Pref.uint("UDP port", DEFAULT_PORT,
                                    "UDP destination port of MetaRoCE datagrams (default 4792)")

local function is_data(op) return op >= 0x01 and op <= 0x04 end

local function headers_len(op)
  if is_data(op) then return BASE_LEN + DATA_LEN end
  if op == 0x10 then return BASE_LEN + ACK_LEN end
  return BASE_LEN
end

local function flag_names(flags)
  local out = {}
  for _, fl in ipairs(flag_list) do
    if bit.band(flags, fl[1]) ~= 0 then out[#out + 1] = fl[2] end
  end
  return table.concat(out, ",")
end

-- "a", "a-b" runs of consecutive PSNs, comma separated (PSNs wrap modulo 2^32).
local function psn_ranges(psns)
  local out = {}
  local i = 1
  while i <= #psns do
    local j = i
    while j < #psns and psns[j + 1] == (psns[j] + 1) % 4294967296 do j = j + 1 end
    if j == i then
      out[#out + 1] = tostring(psns[i])
    else
      out[#out + 1] = psns[i] .. "-" .. psns[j]
    end
    i = j + 1
  end
  return table.concat(out, ",")
end

-- Adds the base header's fields that lie within the captured bytes.
local function dissect_base(tvb, tree, caplen)
  local function fits(off, len) return off + len <= caplen end
  if fits(0, 1) then tree:add(f.version, tvb(0, 1)) end
  if fits(1, 1) then tree:add(f.opcode, tvb(1, 1)) end
  if fits(2, 2) then
    local fi = tree:add(f.flags, tvb(2, 2))
    local names = flag_names(tvb(2, 2):uint())
    if names ~= "" then fi:append_text(" (" .. names .. ")") end
    fi:add(f.flag_ack_req, tvb(2, 2))
    fi:add(f.flag_retransmit, tvb(2, 2))
    fi:add(f.flag_filler, tvb(2, 2))
    fi:add(f.flag_wants_pull, tvb(2, 2))
    fi:add(f.flag_delayed_ack, tvb(2, 2))
    fi:add(f.flag_probe_reply, tvb(2, 2))
    fi:add(f.flag_pulled, tvb(2, 2))
    fi:add(f.flag_pull, tvb(2, 2))
    fi:add(f.flag_pulling, tvb(2, 2))
    fi:add(f.flag_cnp, tvb(2, 2))
    local reserved = bit.band(tvb(2, 2):uint(), FLAG_RESERVED)
    local ri = fi:add(f.flag_reserved, tvb(2, 2), reserved)
    if reserved ~= 0 then
      ri:add_proto_expert_info(e.reserved, "Reserved flag bits are set")
    end
  end
  if fits(4, 4) then tree:add(f.dest_conn, tvb(4, 4)) end
  if fits(8, 2) then tree:add(f.path_id, tvb(8, 2)) end
  if fits(10, 2) then tree:add(f.payload_len, tvb(10, 2)) end
  if fits(12, 4) then tree:add(f.psn, tvb(12, 4)) end
  if fits(16, 8) then tree:add(f.token, tvb(16, 8)) end
end

local function dissect_data(tvb, tree)
  local o = BASE_LEN
  local st = tree:add(tvb(o, DATA_LEN), "Data Header")
  st:add(f.msg_seq, tvb(o + 0, 4))
  st:add(f.msg_len, tvb(o + 4, 4))
  st:add(f.offset, tvb(o + 8, 4))
  st:add(f.rkey, tvb(o + 12, 4))
  st:add(f.remote_addr, tvb(o + 16, 8))
  st:add(f.recv_seq, tvb(o + 24, 4))
  st:add(f.imm, tvb(o + 28, 4))
  return st
end

local function dissect_ack(tvb, tree)
  local o = BASE_LEN
  local st = tree:add(tvb(o, ACK_LEN), "Ack Header")
  st:add(f.cum_psn, tvb(o + 0, 4))
  st:add(f.ack_psn, tvb(o + 4, 4))
  st:add(f.ce_count, tvb(o + 8, 4))
  st:add(f.window_hint, tvb(o + 12, 4))
  st:add(f.syndrome, tvb(o + 16, 1))
  st:add(f.pull_seq, tvb(o + 17, 1))
  st:add(f.rnr_delay_us, tvb(o + 18, 2))
  st:add(f.ack_msg_seq, tvb(o + 20, 4))

  -- SACK: bit k is bit k%8 (LSB first) of byte k/8 and stands for PSN cum_psn + 1 + k.
  local cum = tvb(o + 0, 4):uint()
  local so = o + 24
  local si = st:add(f.sack, tvb(so, 32))
  local psns = {}
  local where = {}
  for byte = 0, 31 do
    local v = tvb(so + byte, 1):uint()
    for b = 0, 7 do
      if bit.band(v, bit.lshift(1, b)) ~= 0 then
        psns[#psns + 1] = (cum + 1 + byte * 8 + b) % 4294967296
        where[#where + 1] = byte
      end
    end
  end
  local ranges = psn_ranges(psns)
  si:add(f.sack_count, tvb(so, 32), #psns):set_generated()
  if #psns > 0 then si:add(f.sack_ranges, tvb(so, 32), ranges):set_generated() end
  for i, psn in ipairs(psns) do
    si:add(f.sack_psn, tvb(so + where[i], 1), psn):set_generated()
  end
  return st, cum, #psns, ranges
end

function metaroce.dissector(tvb, pinfo, tree)
  local caplen = tvb:len()               -- bytes we may read
  local length = tvb:reported_len()      -- bytes the datagram had on the wire
  pinfo.cols.protocol = "MetaRoCE"
  local root = tree:add(metaroce, tvb(), "MetaRoCE v1")

  -- Check 1: a whole base header.
  if length < BASE_LEN then
    dissect_base(tvb, root, caplen)
    root:add_proto_expert_info(e.truncated, string.format(
      "Datagram of %d bytes is shorter than the %d-byte base header", length, BASE_LEN))
    pinfo.cols.info = string.format("Truncated MetaRoCE (%d bytes)", length)
    return caplen
  end
  if caplen < BASE_LEN then
    dissect_base(tvb, root, caplen)
    root:add_proto_expert_info(e.snapped)
    pinfo.cols.info = "MetaRoCE (cut short by the capture)"
    return caplen
  end

  local base_tree = root:add(tvb(0, BASE_LEN), "Base Header")
  dissect_base(tvb, base_tree, caplen)
  local version = tvb(0, 1):uint()
  local op = tvb(1, 1):uint()
  local flags = tvb(2, 2):uint()
  local conn = tvb(4, 4):uint()
  local path = tvb(8, 2):uint()
  local plen = tvb(10, 2):uint()
  local psn = tvb(12, 4):uint()
  local name = opcode_names[op] or string.format("OPCODE_0x%02x", op)
  local fl = flag_names(flags)
  local flag_text = (fl ~= "") and (" [" .. fl .. "]") or ""

  -- Check 2: version.
  if version ~= VERSION then
    root:add_proto_expert_info(e.bad_version, string.format(
      "Version %d, this dissector knows version %d", version, VERSION))
    pinfo.cols.info = string.format("MetaRoCE bad version %d (opcode 0x%02x)", version, op)
    if caplen > BASE_LEN then root:add(tvb(BASE_LEN), "Undissected bytes") end
    return caplen
  end
  -- Check 3: opcode.
  if not opcode_names[op] then
    root:add_proto_expert_info(e.bad_opcode, string.format("Opcode 0x%02x is not valid in v1", op))
    pinfo.cols.info = string.format("%s conn=%d path=%d psn=%d (unknown opcode)",
                                    name, conn, path, psn)
    if caplen > BASE_LEN then root:add(tvb(BASE_LEN), "Undissected bytes") end
    return caplen
  end
  root:append_text(", " .. name)

  -- Check 4: the headers of the opcode.
  local hlen = headers_len(op)
  if length < hlen then
    root:add_proto_expert_info(e.truncated, string.format(
      "%s needs %d header bytes, the datagram has %d", name, hlen, length))
    pinfo.cols.info = string.format("%s conn=%d path=%d psn=%d (truncated, %d bytes)",
                                    name, conn, path, psn, length)
    if caplen > BASE_LEN then root:add(tvb(BASE_LEN), "Partial header") end
    return caplen
  end
  if caplen < hlen then
    root:add_proto_expert_info(e.snapped)
    pinfo.cols.info = string.format("%s conn=%d path=%d psn=%d%s", name, conn, path, psn, flag_text)
    return caplen
  end

  -- Checks 5 and 6: payload_len.
  if plen ~= length - hlen then
    root:add_proto_expert_info(e.length_mismatch, string.format(
      "payload_len %d, but %d bytes follow the headers", plen, length - hlen))
  elseif not is_data(op) and plen ~= 0 then
    root:add_proto_expert_info(e.length_mismatch, name .. " must have payload_len 0")
  end

  if is_data(op) then
    local st = dissect_data(tvb, root)
    local msg_len = tvb(BASE_LEN + 4, 4):uint()
    local offset = tvb(BASE_LEN + 8, 4):uint()
    -- Check 7 (Lua numbers are doubles: exact for these 33-bit sums).
    if offset + plen > msg_len then
      st:add_proto_expert_info(e.bad_range, string.format(
        "offset %d + payload_len %d > msg_len %d", offset, plen, msg_len))
    end
    local avail = caplen - hlen
    if avail > 0 then root:add(f.payload, tvb(hlen, avail)) end
    if caplen < length then root:add_proto_expert_info(e.snapped) end
    pinfo.cols.info = string.format("%s conn=%d path=%d psn=%d len=%d msg=%d off=%d%s",
                                    name, conn, path, psn, plen, tvb(BASE_LEN, 4):uint(),
                                    offset, flag_text)
  elseif op == 0x10 then
    local st, cum, count, ranges = dissect_ack(tvb, root)
    local syn = tvb(BASE_LEN + 16, 1):uint()
    -- Check 8.
    if not syndrome_names[syn] then
      st:add_proto_expert_info(e.bad_syndrome, string.format("Syndrome %d is not valid in v1", syn))
    end
    local label = (syn == 0) and "ACK" or (syndrome_names[syn] or string.format("NAK_%d", syn))
    local info = string.format("%s conn=%d path=%d cum=%d ack=%d", label, conn, path, cum,
                               tvb(BASE_LEN + 4, 4):uint())
    if count > 0 then info = info .. " sack=" .. ranges end
    pinfo.cols.info = info .. flag_text
    if caplen > hlen then root:add(tvb(hlen), "Trailing bytes") end
  else -- PROBE
    pinfo.cols.info = string.format("PROBE conn=%d path=%d psn=%d%s", conn, path, psn, flag_text)
    if caplen > hlen then root:add(tvb(hlen), "Trailing bytes") end
  end
  return caplen
end

-- Registration: the udp.port table on the preference's port, and "Decode As".
local udp_table = DissectorTable.get("udp.port")
local registered_port = metaroce.prefs.udp_port
udp_table:add(registered_port, metaroce)
udp_table:add_for_decode_as(metaroce)

function metaroce.prefs_changed()
  if metaroce.prefs.udp_port ~= registered_port then
    if registered_port ~= 0 then udp_table:remove(registered_port, metaroce) end
    registered_port = metaroce.prefs.udp_port
    if registered_port ~= 0 then udp_table:add(registered_port, metaroce) end
  end
end
