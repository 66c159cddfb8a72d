"""Host programs: allocation shape and stride inference, the host JIT that compiles it, and the
`HostProgram` (allocate, launch, alias, free) that runs a compiled fusion."""
