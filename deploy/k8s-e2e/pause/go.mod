module pause

go 1.24.0
