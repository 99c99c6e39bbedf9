package eventcontrol

// To is where an action leads, for the tests.
func (a Action) To() string { return a.to() }
