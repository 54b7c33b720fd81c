package hostif

// RingsTaken is, for every open ring pair in the order ServeRings serves
// them (the order they opened in), how many submissions the driver has
// taken from it.
func (s *Server) RingsTaken() []uint64 {
	var out []uint64
	for _, rg := range s.rings.snapshot() {
		rg.mu.Lock()
		out = append(out, rg.taken)
		rg.mu.Unlock()
	}
	return out
}
