package creation

import (
	"slices"
	"sync"

	"github.com/crijournal/crijournal/journal"
)

// Plan is a run of steps of one creation whose intents are committed together (see
// intend) and which then act: make it with Creation.Plan, add each step with AddStep, or
// AddStepBeside, then Run. The steps act in turn, except that a step added beside the one
// before it acts at the same time as that one (a group): the next step acts once the
// whole group is done.
type Plan struct {
	c      *Creation
	steps  []journal.Intended
	groups [][]planned // in the order the steps were added
}

// Plan returns an empty plan of steps of c.
func (c *Creation) Plan() *Plan { return &Plan{c: c} }

// Creation is the creation whose steps p takes.
func (p *Plan) Creation() *Creation { return p.c }

// planned is one step of a plan: its stage, and take, which takes it as step seq of its
// creation and, when it fails, has not rolled the creation back.
type planned struct {
	stage string
	take  func(seq int) error
}

// AddStep adds step a to plan p, to be taken within lim once the steps added before it are
// done; use receives its result.
func AddStep[T any](p *Plan, lim Limit, a journal.Action[T], use func(T)) {
	p.groups = append(p.groups, nil)
	AddStepBeside(p, lim, a, use)
}

// AddStepBeside adds step a to plan p, to be taken within lim at the same time as the
// step added last (and any added beside that one): for a step that neither needs that
// one's result nor is needed by it. use receives its result, on a goroutine of its own,
// before Run returns; it must touch nothing the other uses of the group touch.
func AddStepBeside[T any](p *Plan, lim Limit, a journal.Action[T], use func(T)) {
	p.steps = append(p.steps, intentOf(a))
	if len(p.groups) == 0 {
		p.groups = append(p.groups, nil)
	}
	last := len(p.groups) - 1
	p.groups[last] = append(p.groups[last], planned{stage: a.Stage, take: func(seq int) error {
		result, err := takeIntended(p.c, seq, lim, a)
		if err == nil && use != nil {
			use(result)
		}
		return err
	}})
}

// Run commits the intents of p's steps in one commit and takes them, group by group. When
// a step fails, the other steps of its group are waited for and no later group starts;
// the creation is then rolled back (every step of the plan undone, acted or not), and
// the error of the first failed step of the group, in the order they were added, is
// returned.
func (p *Plan) Run() error {
	if len(p.steps) == 0 {
		return nil
	}
	seq, err := intend(p.c, p.steps...)
	if err != nil {
		return err
	}
	for _, group := range p.groups {
		stage, err := p.takeGroup(group, seq)
		if err != nil {
			return p.c.Fail(stage, err)
		}
		seq += len(group)
	}
	return nil
}

// takeGroup takes the steps of group, the first as step seq, all at once, and waits for
// them; it returns the first failure in the group's order, and the failed step's stage.
// The record's stage (journal.Staged, which each step sets as it begins) is, while any step
// of the group still acts, one of those: when a step ends before the others, the first
// still acting becomes the stage again, so that inspect and a waiting retry name what the
// creation waits for.
func (p *Plan) takeGroup(group []planned, seq int) (string, error) {
	if len(group) == 1 {
		return group[0].stage, group[0].take(seq)
	}
	errs := make([]error, len(group))
	var mu sync.Mutex
	acting := make([]bool, len(group))
	for i := range acting {
		acting[i] = true
	}
	var wg sync.WaitGroup
	for i, step := range group {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = step.take(seq + i)
			mu.Lock()
			defer mu.Unlock()
			acting[i] = false
			if j := slices.Index(acting, true); j >= 0 {
				// Only what inspect shows: a journal that failed fails the step's
				// own calls (Done) too.
				_ = p.c.e.journal.Staged(p.c.rec.ID, group[j].stage)
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return group[i].stage, err
		}
	}
	return "", nil
}
