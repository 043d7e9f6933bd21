[ S = "q\"uote\\back\t\101"; T = TRUE; F = false; I = -42; H = 0x1f; R = 2.5e3; U = undefined; E = error; N = [ a = 1; b = "]" ]; L = { 1, [ c = 2 ], "}" } ]
