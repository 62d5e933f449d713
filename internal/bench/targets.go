package bench

import "fmt"

// rel is a target that is a ratio to a peer or a floor measured in the same run, so that
// it holds on a slower or busier machine as long as paddock keeps its place against it.
type rel struct {
	k   float64 // the bound, a multiple of the reference
	ref string  // the reference, as the target column names it
	// atLeast is set for a figure where higher is better (a rate); else the figure must be
	// at most k× the reference.
	atLeast bool
}

// atMost is a target of at most k× ref; atLeast of at least k× ref.
func atMost(k float64, ref string) rel  { return rel{k: k, ref: ref} }
func atLeast(k float64, ref string) rel { return rel{k: k, ref: ref, atLeast: true} }

// String is the target column.
func (r rel) String() string {
	op := "≤"
	if r.atLeast {
		op = "≥"
	}
	return fmt.Sprintf("%s %.4g× %s", op, r.k, r.ref)
}

// judged says whether v against the reference refV meets the target: "" when it cannot
// be judged (the reference was not measured, or measured nothing).
func (r rel) judged(v, refV float64, refMissing string) (ok, judged bool) {
	if refMissing != "" || refV <= 0 {
		return false, false
	}
	if r.atLeast {
		return v >= r.k*refV, true
	}
	return v <= r.k*refV, true
}

// met is the met column: yes, **no**, or "—" when the reference was not measured.
func (r rel) met(v, refV float64, refMissing string) string {
	ok, judged := r.judged(v, refV, refMissing)
	if !judged {
		return "—"
	}
	return yesNo(ok)
}

// word says in a sentence whether v meets the target.
func (r rel) word(v, refV float64, refMissing string) string {
	ok, judged := r.judged(v, refV, refMissing)
	if !judged {
		return "not judged, " + r.ref + " not measured"
	}
	return metWord(ok)
}

// row sets the row's ratio, target and met columns against the reference's median.
func (r rel) row(row Row, refV float64, refMissing string) Row {
	if refMissing == "" {
		row.Ratio = ratio(row.P50, refV)
	}
	row.Target, row.Met = r.String(), r.met(row.P50, refV, refMissing)
	return row
}
