[ LocalFileName = "/execute/dir_1/a.bin"; Url = "osdf:///ns/a.bin" ]
[ LocalFileName = "/execute/dir_1/b"; Url = "pelican://fed:8443/ns/b" ]
