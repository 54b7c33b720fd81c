package reallink

// CPUOfStat exposes cpuOfStat to the tests.
var CPUOfStat = cpuOfStat
