module github.com/keypool-go/keypool

go 1.26
