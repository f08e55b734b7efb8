"""What follows a fleet verdict: nodes taken out with their evidence kept (through operate.act, the one call every
path makes), and the one re-test with known-good partners that brings them back or convicts a job's suspects."""
