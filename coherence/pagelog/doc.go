// Package pagelog keeps a node's pages on stable storage: the pages it
// owns (their committed content) and the backup copies it holds for other
// owners, so that an agent restarted after a crash or a power cut of the
// whole fabric reloads them (agent option `durable`, its `state-dir`).
//
// The log is one append-only file of records, each checksummed (CRC-32C):
// a record puts a page (its whole state: key, owner and its incarnation,
// ownership epoch, version, backups and rank, attributes, content), drops
// one, or puts the home record of a page the node is the home of (its
// owner and epoch, or that it was freed); the last record of a key wins. The coherence engine appends
// the records of every page a step changed and syncs them (write, then
// fsync) before any acknowledgement of that step leaves the node; a page's
// new state is the one in force only once its record is synced ("write,
// fsync, then switch": the record is the switch). The records of one sync
// go in one batch record with its own checksum, so a crash in the middle
// of the write keeps all of the step's records or none (a rewritten log
// holds each record in a batch of its own). A log of the first format
// (records outside batches, magic DPUPLOG\x01) is read and rewritten in
// the second at Open. When the file has grown
// past twice what is live, the live records are written to a new file,
// synced, and renamed over the old one (then the directory is synced).
//
// The file starts with a header naming the node and the fabric it belongs
// to. Open refuses, with the file and the reason, a log that is not one
// (bad magic or header checksum), one of another node or fabric, and one
// corrupt in the middle (a batch that fails its checksum with a valid
// batch after it). A batch cut short or failing its checksum at the end,
// with nothing valid after it, is a torn tail (the write of a step that
// never completed, so never acknowledged): it is dropped, and the file is
// rewritten without it before the node starts.
//
// The log writes through a Disk. OSDisk is a directory on a file system;
// MemDisk is its in-memory twin for the simulator and tests: it keeps what
// was synced apart from what was only written, and Crash keeps a seeded,
// possibly torn, prefix of the unsynced bytes, as a power cut would.
package pagelog
