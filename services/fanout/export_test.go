package fanout

// PlannerInFlight is the planner's handler slots, for the test that fills
// every one of them with poison.
const PlannerInFlight = plannerInFlight
