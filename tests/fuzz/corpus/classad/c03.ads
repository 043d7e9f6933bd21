[ Url = "osdf:///a"; X = strcat("a;", "]") + 1; Y = [a] + [b]; Z = MY.Foo =?= undefined; 'odd name' = 1 // trailing
]
