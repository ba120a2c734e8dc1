module github.com/opendilab/di-orchestrator/kind/images/pause

go 1.24.0
