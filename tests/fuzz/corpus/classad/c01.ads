[
  Url = "stash:///x";   /* the source */
  LocalFileName = "x";
]

[ ]
