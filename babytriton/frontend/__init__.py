"""What a @jit call starts from: the function's source, its FunctionInfo and options, the arguments
checked into ArgSpecs and the device they name. Imports only core/."""
