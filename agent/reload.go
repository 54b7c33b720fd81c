package agent

import (
	"maps"
	"reflect"
	"slices"
)

// Reload applies what of next can change while the agent runs and names
// the rest. Live: metrics-listen (the server moves, or stops when empty)
// and log-level (the caller owns the logger: it applies it when Reload
// lists it). Every other key that differs from the running configuration
// is listed in restart: it takes effect only when the agent starts again.
// GPU limits of running processes change live through the control socket
// (dpuctl gpu set); the configured defaults need a restart.
func (a *Agent) Reload(next Config) (applied, restart []string, err error) {
	if err := next.Validate(); err != nil {
		return nil, nil, err
	}
	cur := a.cfg
	m := &a.metrics
	m.mu.Lock()
	if next.MetricsListen != m.listen {
		if err := a.listenMetricsLocked(next.MetricsListen); err != nil {
			m.mu.Unlock()
			return nil, nil, err
		}
		applied = append(applied, "metrics-listen")
	}
	m.mu.Unlock()
	if next.LogLevel != cur.LogLevel {
		applied = append(applied, "log-level")
	}
	if next.Seed == 0 {
		next.Seed = cur.Seed // 0 draws one at start: not a change
	}
	for key, differs := range map[string]bool{
		"node":            next.Node != cur.Node,
		"run-dir":         next.RunDir != cur.RunDir,
		"port":            !reflect.DeepEqual(next.Ports, cur.Ports) && (len(next.Ports) > 0 || len(cur.Ports) > 0),
		"loop":            next.Loop != cur.Loop,
		"spin":            next.Spin != cur.Spin,
		"heartbeat":       next.Heartbeat != cur.Heartbeat,
		"dead-interval":   next.DeadInterval != cur.DeadInterval,
		"socket-group":    next.SocketGroup != cur.SocketGroup,
		"pages":           next.Pages != cur.Pages,
		"seed":            next.Seed != cur.Seed,
		"request-timeout": next.RequestTimeout != cur.RequestTimeout,
		"pin-bound":       next.PinBound != cur.PinBound,
		"replicas":        next.Replicas != cur.Replicas,
		"fabric-nodes":    next.FabricNodes != cur.FabricNodes,
		"xdp-pin-dir":     next.XDPPinDir != cur.XDPPinDir,
		"gpu-*":           next.GPU.Default != cur.GPU.Default || !maps.Equal(next.GPU.Devices, cur.GPU.Devices),
	} {
		if differs {
			restart = append(restart, key)
		}
	}
	slices.Sort(restart)
	a.cfg.LogLevel = next.LogLevel
	return applied, restart, nil
}
