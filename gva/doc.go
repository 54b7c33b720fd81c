// Package gva defines the addresses of the shared memory fabric: the 128-bit
// global virtual address (GVA), the host's local virtual address (LVA), page
// numbers, page versions and location tiers.
//
// # GVA layout
//
// A GVA is two 64-bit words, Hi and Lo. Bits are numbered from the least
// significant bit of each word.
//
//	Hi[63:56]  flags (8 bits)          bit 0: huge page (2 MiB); others reserved, zero
//	Hi[55:32]  ref index (24 bits)     0 = primary copy; holder machine index + 1 for a replica
//	Hi[31:0]   machine index (32 bits) the machine where the page was created
//	Lo[63:12]  page number inside the machine
//	Lo[11:0]   byte offset inside the 4 KiB page
//
// The machine index names where a page was created, not who owns it now: the
// current owner is found by following path cache entries. The ref index makes
// a replica's address unique per page and holder; holders above 2^24-2 share
// the top ref index. The path cache key of an address is the page's GVA with
// the ref index and byte offset zeroed ([GVA.Key]).
//
// # Text form
//
// "gva:" followed by exactly 32 lower-case hex digits, Hi then Lo
// (for example gva:00000000000000070000000000001000). [Parse] accepts upper-case
// digits too; [GVA.String] always prints lower case, so Parse(g.String()) == g.
//
// This package does no I/O and allocates only in String.
package gva
