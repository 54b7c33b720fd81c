package main

import (
	"fmt"
	"strings"
	"time"
)

// report renders the outcomes as Markdown: a table per package, then every
// survivor with its place, the mutants triaged as equivalent (not run) with
// the reason, then what killed the rest. The survival rate is of the
// mutants run: survived / (killed + survived); equivalent and invalid
// mutants are outside it.
func report(res []outcome, n int, seed uint64, simSeeds int, took time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "mutate: %s; -n %d -seed %d -sim-seeds %d; %d mutants in %v\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), n, seed, simSeeds, len(res), took.Round(time.Second))
	type row struct{ run, killed, sim, invalid, survived, equivalent int }
	rows := map[string]*row{}
	var order []string
	for _, r := range res {
		p := r.m.pkg
		if rows[p] == nil {
			rows[p] = &row{}
			order = append(order, p)
		}
		w := rows[p]
		switch r.verdict {
		case "invalid":
			w.invalid++
			continue
		case "equivalent":
			w.equivalent++
			continue
		case "killed":
			w.killed++
			if strings.HasPrefix(r.by, "sim:") {
				w.sim++
			}
		case "survived":
			w.survived++
		}
		w.run++
	}
	fmt.Fprintln(&b, "| package | mutants run | killed | of them by dpu-sim | survived | survival | equivalent (not run) | invalid (did not build) |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|---|---|")
	var tot row
	for _, p := range order {
		w := rows[p]
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %s | %d | %d |\n", p, w.run, w.killed, w.sim, w.survived, pct(w.survived, w.run), w.equivalent, w.invalid)
		tot.run += w.run
		tot.killed += w.killed
		tot.sim += w.sim
		tot.survived += w.survived
		tot.invalid += w.invalid
		tot.equivalent += w.equivalent
	}
	fmt.Fprintf(&b, "| all | %d | %d | %d | %d | %s | %d | %d |\n\n", tot.run, tot.killed, tot.sim, tot.survived, pct(tot.survived, tot.run), tot.equivalent, tot.invalid)
	fmt.Fprintln(&b, "Survivors:")
	fmt.Fprintln(&b)
	none := true
	for _, r := range res {
		if r.verdict == "survived" {
			none = false
			fmt.Fprintf(&b, "- %s%s\n", r.m, why(r.m))
		}
	}
	if none {
		fmt.Fprintln(&b, "- none")
	}
	fmt.Fprintln(&b)
	if tot.equivalent > 0 {
		fmt.Fprintln(&b, "Equivalent (triaged in equivalent.go, not run):")
		fmt.Fprintln(&b)
		for _, r := range res {
			if r.verdict == "equivalent" {
				fmt.Fprintf(&b, "- %s: %s\n", r.m, r.by)
			}
		}
		fmt.Fprintln(&b)
	}
	fmt.Fprintln(&b, "Killed (by):")
	fmt.Fprintln(&b)
	for _, r := range res {
		if r.verdict == "killed" {
			fmt.Fprintf(&b, "- %s%s: %s\n", r.m, why(r.m), r.by)
		}
	}
	return b.String()
}

func why(m mutant) string {
	if m.why == "" {
		return ""
	}
	return " (" + m.why + ")"
}

func pct(a, b int) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(a)/float64(b))
}
