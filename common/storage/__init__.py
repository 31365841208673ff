"""How the suite writes the files a later run or tool reads: whole or not at all."""
