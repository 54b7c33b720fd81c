package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

func TestHelpAndVersion(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"--help"}, {"--version"}, {"up", "--help"}, {"down", "-h"}} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), args, &out, &errOut)
		if err != nil && !errors.Is(err, errHelp) {
			t.Errorf("%v: %v", args, err)
		}
		if out.Len() == 0 || errOut.Len() != 0 {
			t.Errorf("%v: stdout %q stderr %q", args, out.String(), errOut.String())
		}
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"up", "--bogus"}, &out, &errOut); err == nil || errors.Is(err, errHelp) || !strings.Contains(err.Error(), "usage:") {
		t.Errorf("bad flag: %v", err)
	}
	if !strings.Contains(usage, "--agent PATH") {
		t.Error("usage does not name --agent")
	}
}
