package main

import (
	"fmt"
	"strings"
	"time"
)

// report renders the outcomes as Markdown: a table per package, then every
// survivor with its place, then what killed the rest.
func report(res []outcome, n int, seed uint64, simSeeds int, took time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "mutate: %s; -n %d -seed %d -sim-seeds %d; %d mutants in %v\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), n, seed, simSeeds, len(res), took.Round(time.Second))
	type row struct{ run, killed, sim, invalid, survived int }
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
	fmt.Fprintln(&b, "| package | mutants run | killed | of them by dpu-sim | survived | survival | invalid (did not build) |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|---|")
	var tot row
	for _, p := range order {
		w := rows[p]
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %s | %d |\n", p, w.run, w.killed, w.sim, w.survived, pct(w.survived, w.run), w.invalid)
		tot.run += w.run
		tot.killed += w.killed
		tot.sim += w.sim
		tot.survived += w.survived
		tot.invalid += w.invalid
	}
	fmt.Fprintf(&b, "| all | %d | %d | %d | %d | %s | %d |\n\n", tot.run, tot.killed, tot.sim, tot.survived, pct(tot.survived, tot.run), tot.invalid)
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
