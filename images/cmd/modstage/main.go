package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/aitherion/dpu/images/kmod"
)

func main() {
	if err := run(os.Stdout, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "modstage:", err)
		os.Exit(1)
	}
}

func run(stdout io.Writer, args []string) error {
	fs := flag.NewFlagSet("modstage", flag.ContinueOnError)
	tree := fs.String("tree", "", "kernel module tree (lib/modules/RELEASE of an unpacked kernel)")
	out := fs.String("o", "", "staging directory to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *tree == "" || *out == "" || fs.NArg() == 0 {
		return errors.New("usage: modstage -tree DIR -o STAGE MODULE...")
	}
	t, err := kmod.OpenTree(*tree)
	if err != nil {
		return err
	}
	mods, err := t.Resolve(fs.Args())
	if err != nil {
		return err
	}
	list, err := t.Stage(*out, mods)
	if err != nil {
		return err
	}
	for _, m := range mods {
		fmt.Fprintf(stdout, "%s\t%s\n", m.Name, m.Path)
	}
	for _, name := range fs.Args() {
		if t.Builtin(name) {
			fmt.Fprintf(stdout, "%s\tbuilt in\n", kmod.Normalize(name))
		}
	}
	fmt.Fprintf(stdout, "load list: %s\n", list)
	return nil
}
