"""What the model sees: the working context, the window built each call, the team's feed,
the handoff a successor reads, and the summaries that keep it all small."""
