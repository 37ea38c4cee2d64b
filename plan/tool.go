package plan

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
)

// ToolName is the exit tool, registered whether or not plan mode is active
// (so entering or leaving plan mode never changes the tool catalog).
const ToolName = "exit_plan_mode"

// Decision is the user's answer to a plan presented for review.
type Decision int

const (
	// Approve leaves plan mode (silently, at the pending exit).
	Approve Decision = iota
	// KeepPlanning fails the call with the user's feedback: the model
	// revises and presents again.
	KeepPlanning
	// Dismiss answers {approved: false} and ends the turn; plan mode stays
	// active until the user's next message.
	Dismiss
)

// Reviewer presents a plan to the user (the host's user-questions channel)
// and returns the decision and, for KeepPlanning, the feedback. An error
// (the channel went away, the service reloaded) fails the call.
type Reviewer interface {
	Review(ctx context.Context, plan string) (Decision, string, error)
}

// ToolResult is what the exit tool returns to the model.
type ToolResult struct {
	IsError bool
	Content json.RawMessage // {"approved": bool} on success; the error text otherwise
	// EndTurn asks the host to conclude the turn (a dismissed review).
	EndTurn bool
}

// Errors of the exit tool (returned inside a failed ToolResult, and as err).
var (
	ErrNotInPlanMode = errors.New("exit_plan_mode is only available in plan mode")
	ErrNoPlan        = errors.New("exit_plan_mode requires a complete markdown plan starting with a # heading")
	ErrNoChannel     = errors.New("exit_plan_mode: no interaction channel to present the plan")
)

func failed(text string) ToolResult {
	return ToolResult{IsError: true, Content: mustJSON(text)}
}

// ExitPlanMode runs the exit_plan_mode tool with the model's arguments
// {"plan": "# ..."}. Outside plan mode, without a plan starting with '#',
// without a reviewer, or when the review fails, the call fails.
func (c *Controller) ExitPlanMode(ctx context.Context, args json.RawMessage, r Reviewer) (ToolResult, error) {
	st, err := c.Get(ctx)
	if err != nil {
		return failed(err.Error()), err
	}
	if !st.Active {
		return failed(ErrNotInPlanMode.Error()), ErrNotInPlanMode
	}
	var a struct {
		Plan string `json:"plan"`
	}
	if json.Unmarshal(args, &a) != nil || !strings.HasPrefix(strings.TrimLeft(a.Plan, " \t\r\n"), "#") {
		return failed(ErrNoPlan.Error()), ErrNoPlan
	}
	if r == nil {
		return failed(ErrNoChannel.Error()), ErrNoChannel
	}
	d, feedback, err := r.Review(ctx, a.Plan)
	if err != nil {
		return failed("plan review failed: " + err.Error()), err
	}
	switch d {
	case Approve:
		c.mu.Lock()
		c.pending = &pending{active: false, silent: true}
		c.mu.Unlock()
		return ToolResult{Content: mustJSON(map[string]bool{"approved": true})}, nil
	case KeepPlanning:
		return failed(feedback), nil
	default:
		return ToolResult{Content: mustJSON(map[string]bool{"approved": false}), EndTurn: true}, nil
	}
}

// CommandResult is what /plan did.
type CommandResult struct {
	Set SetResult
	// Steer, if not empty, is the message the host submits (agent.steer)
	// so that it becomes the next step's user message under plan guidance.
	Steer string
}

// Command runs "/plan [off|message]": bare /plan selects plan mode, "off"
// selects inactive (cancelling a pending entry), and any other text
// selects plan mode and is handed back to be steered in.
func (c *Controller) Command(ctx context.Context, arg string) (CommandResult, error) {
	arg = strings.TrimSpace(arg)
	if arg == "off" {
		r, err := c.Set(ctx, false)
		return CommandResult{Set: r}, err
	}
	r, err := c.Set(ctx, true)
	if err != nil {
		return CommandResult{}, err
	}
	return CommandResult{Set: r, Steer: arg}, nil
}
