from dflash_tools.cli import main

main()
