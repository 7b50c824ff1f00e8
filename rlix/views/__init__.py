"""Reading a cluster the way a person looks at it: the API reader and the rows of `rlix top`.

Shared by the CLI (``rlix top``, ``rlix describe``) and the demo, which
watches the cluster it brought up with the same numbers. It sits below both
so that neither imports the other's package (the CLI runs the demo).
"""
