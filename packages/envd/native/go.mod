module aenv/envd

go 1.19
