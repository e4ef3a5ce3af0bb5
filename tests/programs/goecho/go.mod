module shunt.test/goecho

go 1.21
