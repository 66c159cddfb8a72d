"""Host programs: allocation shape and stride inference, and the `HostProgram` (allocate, launch,
alias, free) that runs a compiled fusion."""
