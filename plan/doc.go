// Package plan implements plan mode on the session event log: the
// log-only plan/mode event ({"active": bool}, the last one wins), its fold
// ([Fold]), the controller's Set/Get decisions ([Controller]), the
// plan:policy prompt section, the exit_plan_mode tool and the /plan
// command, as docs/EVENTS.md (Plan mode) describes them.
//
// The decisions are pure functions of the folded log and the pending
// selection; the only I/O is through the [Log] a host passes in (an
// engine write handle), and time is a parameter. plan imports event only:
// never segment, index, engine or vfs (docs/DESIGN.md#layering).
//
// A host wires it into its agent loop like this:
//
//	cfg, err := plan.LoadConfig(raw)                      // {"section": "..."}; unknown keys fail
//	h, err := db.Open(ctx, sessionID, store.Write)       // any Log: Read + Append
//	pm := plan.NewController(cfg, h, func() int64 { return time.Now().UnixMilli() })
//
//	// user toggles plan mode (UI, or the /plan command):
//	res, err := pm.Set(ctx, true)                         // committed | queued | cancelled | noop
//	cmd, err := pm.Command(ctx, "off")                    // /plan [off|message]; cmd.Steer: text to submit
//
//	// at every accepted in-turn pre-step, before deriving the request:
//	if err := pm.PreStep(ctx); err != nil { log.Warn("plan mode", "err", err) } // never blocks the step
//	if text, ok, _ := pm.Section(ctx); ok {
//		prompt.Add(plan.SectionName, plan.SectionOrder, text) // plan:policy, order 50, only while active
//	}
//
//	// the exit_plan_mode tool (registered always):
//	res, err := pm.ExitPlanMode(ctx, toolArgs, reviewer) // reviewer: the host's user-questions channel
//	if res.EndTurn { endTurn() }
//
//	st, err := pm.Get(ctx) // {active, pending?} for clients
package plan
