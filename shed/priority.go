package shed

// Priority is how much a request matters when the upstream is overloaded:
// a level from [MinPriority] (0, shed first) to [MaxPriority] (499, shed
// last), the scale of failsafe-go's priority package. The zero value is the
// lowest priority.
//
// [PriorityFor] places route traffic in three bands of 100 levels, one per
// criticality, and leaves the lowest band (0–99) and the highest (400–499)
// for callers that set a priority explicitly (a trusted internal batch job
// below everything, a health check above everything).
type Priority int

const (
	// MinPriority is the lowest level; it is shed first.
	MinPriority Priority = 0
	// MaxPriority is the highest level; it is shed last.
	MaxPriority Priority = 499

	// levels is the number of priority levels.
	levels = int(MaxPriority) + 1
	// bandWidth is the number of levels in one criticality band, and so
	// the number of distinct tier ranks that PriorityFor tells apart.
	bandWidth = 100
)

// bandBase is the lowest level of each criticality's band.
var bandBase = [...]Priority{
	Sheddable: 100,
	Default:   200,
	Critical:  300,
}

// PriorityFor returns the priority of a request with criticality c from a
// tenant whose tier has rank tierRank (higher is more important; the rank
// comes from the tier's config).
//
// Criticality dominates tier: a starter tenant's critical request outranks
// an enterprise tenant's default one, which outranks anyone's sheddable one.
// Under overload the upstream's capacity goes first to what people are
// waiting on, for every tenant, and the most important tiers lose their
// background work last. Within a criticality, a higher rank is a higher
// priority. Ranks below 0 count as 0 and ranks above 99 as 99. An unknown
// criticality counts as Default.
func PriorityFor(tierRank int, c Criticality) Priority {
	if int(c) >= len(bandBase) {
		c = Default
	}
	return bandBase[c] + Priority(min(max(tierRank, 0), bandWidth-1))
}

// clamp returns p limited to [MinPriority, MaxPriority].
func (p Priority) clamp() Priority {
	return min(max(p, MinPriority), MaxPriority)
}

// FloorFor returns the priority below which every pool sheds when one
// pool's shedder stands at threshold th and the upstream is the bottleneck:
// the lowest level of th's band, at most the critical band's. A pool
// shedding default requests makes every pool shed sheddable ones; one
// shedding critical (or above) makes every pool shed default and sheddable
// ones, never critical. Zero (nothing shed) gives zero.
func FloorFor(th Priority) Priority {
	return min(th/bandWidth*bandWidth, bandBase[Critical])
}
