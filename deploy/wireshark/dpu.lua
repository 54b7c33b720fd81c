-- Wireshark dissector for the dpu NoC: the link datagram (ethertype 0x88B5
-- on Ethernet links, or a UDP payload on UDP links) and the NoC frame a
-- whole message carries. Formats: noc/link/doc.go (link header) and
-- noc/frame.go (frame header); all fields in network byte order.
--
-- Use:  wireshark -X lua_script:deploy/wireshark/dpu.lua capture.pcapng
--       tshark    -X lua_script:deploy/wireshark/dpu.lua -r capture.pcapng -V
-- or copy this file into ~/.local/lib/wireshark/plugins/. UDP links are
-- decoded on the port of the preference "dpu_link.udp_port" (default 7000)
-- and with "Decode As... DPU_LINK" on any other.

local link = Proto("dpu_link", "DPU NoC link")
local noc = Proto("dpu_noc", "DPU NoC frame")

local link_flags = {
	[0x01] = "data", [0x02] = "first", [0x04] = "last", [0x08] = "ack-req",
	[0x10] = "clock-req", [0x20] = "clock-ans", [0x40] = "packed",
}

local lf = {
	version     = ProtoField.uint8("dpu_link.version", "Version"),
	flags       = ProtoField.uint8("dpu_link.flags", "Flags", base.HEX),
	f_data      = ProtoField.bool("dpu_link.flags.data", "Data", 8, nil, 0x01),
	f_first     = ProtoField.bool("dpu_link.flags.first", "First fragment", 8, nil, 0x02),
	f_last      = ProtoField.bool("dpu_link.flags.last", "Last fragment", 8, nil, 0x04),
	f_ackreq    = ProtoField.bool("dpu_link.flags.ack_req", "Ack requested", 8, nil, 0x08),
	f_packed    = ProtoField.bool("dpu_link.flags.packed", "Packed (several frames, each after its length)", 8, nil, 0x40),
	nsack       = ProtoField.uint8("dpu_link.nsack", "SACK blocks"),
	src_session = ProtoField.uint64("dpu_link.src_session", "Source session", base.HEX),
	src_epoch   = ProtoField.uint32("dpu_link.src_epoch", "Source epoch"),
	dst_session = ProtoField.uint64("dpu_link.dst_session", "Destination session", base.HEX),
	dst_epoch   = ProtoField.uint32("dpu_link.dst_epoch", "Destination epoch"),
	seq         = ProtoField.uint32("dpu_link.seq", "Sequence number"),
	ack         = ProtoField.uint32("dpu_link.ack", "Cumulative ack"),
	credits     = ProtoField.uint16("dpu_link.credits", "Credits"),
	length      = ProtoField.uint16("dpu_link.length", "Payload length"),
	sack_start  = ProtoField.uint16("dpu_link.sack.start", "SACK start"),
	sack_count  = ProtoField.uint16("dpu_link.sack.count", "SACK count"),
	origin      = ProtoField.int64("dpu_link.clock.origin", "Clock: request sent (requester's clock, ns)"),
	receive     = ProtoField.int64("dpu_link.clock.receive", "Clock: request received (ns)"),
	transmit    = ProtoField.int64("dpu_link.clock.transmit", "Clock: sent (sender's clock, ns)"),
	payload     = ProtoField.bytes("dpu_link.payload", "Fragment"),
	crc         = ProtoField.uint32("dpu_link.crc32c", "CRC32C", base.HEX),
}
link.fields = {lf.version, lf.flags, lf.f_data, lf.f_first, lf.f_last, lf.f_ackreq, lf.f_packed, lf.nsack, lf.src_session,
	lf.src_epoch, lf.dst_session, lf.dst_epoch, lf.seq, lf.ack, lf.credits, lf.length, lf.sack_start,
	lf.sack_count, lf.origin, lf.receive, lf.transmit, lf.payload, lf.crc}

local classes = {[0] = "load", [1] = "store", [2] = "atomic", [3] = "control"}

local nf = {
	version  = ProtoField.uint8("dpu_noc.version", "Version"),
	class    = ProtoField.uint8("dpu_noc.class", "Class", base.DEC, classes),
	op       = ProtoField.uint8("dpu_noc.op", "Op"),
	flags    = ProtoField.uint8("dpu_noc.flags", "Flags", base.HEX),
	f_reply  = ProtoField.bool("dpu_noc.flags.reply", "Reply", 8, nil, 0x01),
	f_error  = ProtoField.bool("dpu_noc.flags.error", "Error", 8, nil, 0x02),
	f_huge   = ProtoField.bool("dpu_noc.flags.huge", "Huge page", 8, nil, 0x04),
	f_path   = ProtoField.bool("dpu_noc.flags.path", "Page-keyed (follows the path cache)", 8, nil, 0x08),
	src      = ProtoField.uint32("dpu_noc.src", "Source node"),
	dst      = ProtoField.uint32("dpu_noc.dst", "Destination node"),
	hops     = ProtoField.uint8("dpu_noc.hops", "Hops"),
	priority = ProtoField.uint8("dpu_noc.priority", "Priority"),
	plen     = ProtoField.uint16("dpu_noc.payload_length", "Payload length"),
	req      = ProtoField.uint64("dpu_noc.request", "Request id"),
	gva      = ProtoField.string("dpu_noc.gva", "GVA"),
	pversion = ProtoField.uint64("dpu_noc.page_version", "Page version"),
	payload  = ProtoField.bytes("dpu_noc.payload", "Payload"),
}
noc.fields = {nf.version, nf.class, nf.op, nf.flags, nf.f_reply, nf.f_error, nf.f_huge, nf.f_path, nf.src, nf.dst,
	nf.hops, nf.priority, nf.plen, nf.req, nf.gva, nf.pversion, nf.payload}

local LINK_HEADER, SACK_LEN, TRAILER, NOC_HEADER = 40, 4, 4, 48

local function node_name(v)
	if v == 0xFFFFFFFF then return "any" end
	return tostring(v)
end

function noc.dissector(buf, pinfo, tree)
	if buf:len() < NOC_HEADER then return 0 end
	local class = buf(1, 1):uint()
	local plen = buf(14, 2):uint()
	local t = tree:add(noc, buf(0, math.min(buf:len(), NOC_HEADER + plen)))
	t:add(nf.version, buf(0, 1))
	t:add(nf.class, buf(1, 1))
	t:add(nf.op, buf(2, 1))
	local ft = t:add(nf.flags, buf(3, 1))
	ft:add(nf.f_reply, buf(3, 1))
	ft:add(nf.f_error, buf(3, 1))
	ft:add(nf.f_huge, buf(3, 1))
	ft:add(nf.f_path, buf(3, 1))
	t:add(nf.src, buf(4, 4))
	t:add(nf.dst, buf(8, 4))
	t:add(nf.hops, buf(12, 1))
	t:add(nf.priority, buf(13, 1))
	t:add(nf.plen, buf(14, 2))
	t:add(nf.req, buf(16, 8))
	local gva = "gva:" .. buf(24, 16):bytes():tohex():lower()
	t:add(nf.gva, buf(24, 16), gva)
	t:add(nf.pversion, buf(40, 8))
	if plen > 0 and buf:len() >= NOC_HEADER + plen then
		t:add(nf.payload, buf(NOC_HEADER, plen))
	end
	pinfo.cols.protocol = "DPU NoC"
	pinfo.cols.info = string.format("%s/%d %s -> %s req %s %s v%s",
		classes[class] or tostring(class), buf(2, 1):uint(), node_name(buf(4, 4):uint()),
		node_name(buf(8, 4):uint()), tostring(buf(16, 8):uint64()), gva, tostring(buf(40, 8):uint64()))
	return NOC_HEADER + plen
end

function link.dissector(buf, pinfo, tree)
	-- Version 2 marks a datagram with clock timestamps (after the SACK blocks).
	local version = buf:len() >= LINK_HEADER + TRAILER and buf(0, 1):uint() or 0
	if version ~= 1 and version ~= 2 then return 0 end
	local flags = buf(1, 1):uint()
	local nsack = buf(2, 1):uint()
	local plen = buf(38, 2):uint()
	local clock = 0
	if version == 2 and bit.band(flags, 0x10) ~= 0 then clock = 8 end
	if version == 2 and bit.band(flags, 0x20) ~= 0 then clock = 24 end
	local sacks = LINK_HEADER + nsack * SACK_LEN
	local off = sacks + clock
	if off + plen + TRAILER > buf:len() then return 0 end
	local t = tree:add(link, buf(0, off + plen + TRAILER))
	t:add(lf.version, buf(0, 1))
	local ft = t:add(lf.flags, buf(1, 1))
	ft:add(lf.f_data, buf(1, 1))
	ft:add(lf.f_first, buf(1, 1))
	ft:add(lf.f_last, buf(1, 1))
	ft:add(lf.f_ackreq, buf(1, 1))
	ft:add(lf.f_packed, buf(1, 1))
	t:add(lf.nsack, buf(2, 1))
	t:add(lf.src_session, buf(4, 8))
	t:add(lf.src_epoch, buf(12, 4))
	t:add(lf.dst_session, buf(16, 8))
	t:add(lf.dst_epoch, buf(24, 4))
	t:add(lf.seq, buf(28, 4))
	t:add(lf.ack, buf(32, 4))
	t:add(lf.credits, buf(36, 2))
	t:add(lf.length, buf(38, 2))
	for i = 0, nsack - 1 do
		local o = LINK_HEADER + i * SACK_LEN
		t:add(lf.sack_start, buf(o, 2))
		t:add(lf.sack_count, buf(o + 2, 2))
	end
	if clock == 24 then
		t:add(lf.origin, buf(sacks, 8))
		t:add(lf.receive, buf(sacks + 8, 8))
		t:add(lf.transmit, buf(sacks + 16, 8))
	elseif clock == 8 then
		t:add(lf.transmit, buf(sacks, 8))
	end
	if plen > 0 then t:add(lf.payload, buf(off, plen)) end
	t:add(lf.crc, buf(off + plen, 4))

	local names = {}
	for bitv, name in pairs(link_flags) do
		if bit.band(flags, bitv) ~= 0 then names[#names + 1] = name end
	end
	table.sort(names)
	pinfo.cols.protocol = "DPU link"
	pinfo.cols.info = string.format("seq %d ack %d credits %d [%s]", buf(28, 4):uint(), buf(32, 4):uint(),
		buf(36, 2):uint(), table.concat(names, ","))
	-- A packed datagram carries several NoC frames, each after its length
	-- (u16); one that carries a whole message carries one.
	if bit.band(flags, 0x47) == 0x47 then
		local o = off
		while o + 2 <= off + plen do
			local n = buf(o, 2):uint()
			if n == 0 or o + 2 + n > off + plen then break end
			if n >= NOC_HEADER then noc.dissector:call(buf(o + 2, n):tvb(), pinfo, tree) end
			o = o + 2 + n
		end
	elseif bit.band(flags, 0x07) == 0x07 and plen >= NOC_HEADER then
		noc.dissector:call(buf(off, plen):tvb(), pinfo, tree)
	end
	return off + plen + TRAILER
end

link.prefs.udp_port = Pref.uint("UDP port", 7000, "UDP port of dpu-agent UDP links (0: none)")

local udp_table = DissectorTable.get("udp.port")
local registered = 0

local function register_udp()
	if registered ~= 0 then udp_table:remove(registered, link) end
	registered = link.prefs.udp_port
	if registered ~= 0 then udp_table:add(registered, link) end
end

function link.prefs_changed() register_udp() end

DissectorTable.get("ethertype"):add(0x88B5, link)
udp_table:add_for_decode_as(link)
register_udp()
