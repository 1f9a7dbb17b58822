print("dbx-mount: not built yet")
