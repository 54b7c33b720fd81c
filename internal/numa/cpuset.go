package numa

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaxCPU bounds the CPU numbers a cpulist may name (the kernel's
// CONFIG_NR_CPUS is at most 8192).
const MaxCPU = 8192

// CPUSet is a set of CPU numbers in ascending order, without repeats.
type CPUSet []int

// ParseCPUList decodes the kernel's CPU list format: comma-separated CPU
// numbers and ranges ("0-3,8,10-11"; a range may have a stride, "0-7:2",
// as the kernel's bitmap_parselist accepts). Surrounding white space is
// ignored; an empty list is the empty set.
func ParseCPUList(s string) (CPUSet, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return CPUSet{}, nil
	}
	var set CPUSet
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, stride, err := parseRange(part)
		if err != nil {
			return nil, fmt.Errorf("cpulist %q: %w", part, err)
		}
		for c := lo; c <= hi; c += stride {
			set = append(set, c)
		}
	}
	slices.Sort(set)
	return slices.Compact(set), nil
}

func parseRange(part string) (lo, hi, stride int, err error) {
	stride = 1
	if r, st, ok := strings.Cut(part, ":"); ok {
		part = r
		if stride, err = cpuNumber(st); err != nil {
			return 0, 0, 0, err
		}
		if stride == 0 {
			return 0, 0, 0, errors.New("stride 0")
		}
	}
	a, b, isRange := strings.Cut(part, "-")
	if lo, err = cpuNumber(a); err != nil {
		return 0, 0, 0, err
	}
	hi = lo
	if isRange {
		if hi, err = cpuNumber(b); err != nil {
			return 0, 0, 0, err
		}
		if hi < lo {
			return 0, 0, 0, errors.New("range ends before it starts")
		}
	} else if stride != 1 {
		return 0, 0, 0, errors.New("stride without a range")
	}
	return lo, hi, stride, nil
}

func cpuNumber(s string) (int, error) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a CPU number", s)
	}
	v, err := strconv.Atoi(s)
	if err != nil || v >= MaxCPU {
		return 0, fmt.Errorf("CPU %q beyond %d", s, MaxCPU-1)
	}
	return v, nil
}

// String is the set in the kernel's CPU list format, ranges folded
// ("0-3,8").
func (s CPUSet) String() string {
	var b strings.Builder
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(s[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(s[j]))
		}
		i = j + 1
	}
	return b.String()
}

// Contains reports whether cpu is in the set.
func (s CPUSet) Contains(cpu int) bool {
	_, ok := slices.BinarySearch(s, cpu)
	return ok
}
