//go:build !dpubug

package main

const bugsCompiled = false
