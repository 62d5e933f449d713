package server

// HistoryFollowers is how many sandboxes' history events are followed now.
func (s *Server) HistoryFollowers() int64 { return s.historyFollowers.Load() }
