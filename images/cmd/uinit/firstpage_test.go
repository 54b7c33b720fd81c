package main

// The tests' nodes (hostif/hostiftest) have no allocation epochs: their
// first page is page 1.
func init() { firstPageNumber = 1 }
