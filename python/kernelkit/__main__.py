from kernelkit.cli import main

main()
