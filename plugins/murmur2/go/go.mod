module pctl.dev/pctl/plugins/murmur2/go

go 1.26
