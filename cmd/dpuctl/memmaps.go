package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/aitherion/dpu/gva"
)

// mapsRow is one area of dpuctl mem maps -j.
type mapsRow struct {
	PID         uint32  `json:"pid"`
	UID         uint32  `json:"uid"`
	LVA         string  `json:"lva"`
	GVA         gva.GVA `json:"gva"`
	Bytes       uint64  `json:"bytes"`
	Prot        string  `json:"prot"`
	ReadFaults  uint64  `json:"read_faults"`
	WriteFaults uint64  `json:"write_faults"`
	Writebacks  uint64  `json:"writebacks"`
	Drops       uint64  `json:"drops"`
}

// memMaps lists the dpu_mmap areas of this host's processes and their
// fault counts, as the library reports them to the agent.
func memMaps(s *memSession, a memArgs) error {
	if err := a.want(0, 0, ""); err != nil {
		return err
	}
	c, err := s.dial()
	if err != nil {
		return err
	}
	total, entries, err := c.Maps(s.e.ctx)
	if err != nil {
		return err
	}
	rows := make([]mapsRow, 0, len(entries))
	for _, e := range entries {
		prot := "r-"
		if e.Prot&2 != 0 {
			prot = "rw"
		}
		rows = append(rows, mapsRow{PID: e.PID, UID: e.UID, LVA: fmt.Sprintf("%#x", e.LVA), GVA: e.GVA, Bytes: e.Bytes,
			Prot: prot, ReadFaults: e.ReadFaults, WriteFaults: e.WriteFaults, Writebacks: e.Writebacks, Drops: e.Drops})
	}
	if s.e.json {
		return s.out(rows)
	}
	w := tabwriter.NewWriter(s.e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PID\tUID\tLVA\tGVA\tBYTES\tPROT\tREAD-FAULTS\tWRITE-FAULTS\tWRITE-BACKS\tDROPS")
	for _, r := range rows {
		fmt.Fprintf(w, "%d\t%d\t%s\t%v\t%d\t%s\t%d\t%d\t%d\t%d\n", r.PID, r.UID, r.LVA, r.GVA, r.Bytes, r.Prot,
			r.ReadFaults, r.WriteFaults, r.Writebacks, r.Drops)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if total > len(rows) {
		_, err = fmt.Fprintf(s.e.stdout, "(%d more not shown)\n", total-len(rows))
	}
	return err
}
