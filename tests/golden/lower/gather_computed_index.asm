; fusion/gather_computed_index.kernels compiled for the simulated device (device::compile, default config).
; To rewrite: BLESS=1 cargo test -p tilejit-tests lowering_golden

; kernel 0: add (class Flat)
; core function 0: units Kernel, tile 2048, buffers [b0,b1], workspace []
.kernel k_add aiv
.gm b0_1 i64 [] inout
.gm b1_2 i64 [] inout
.arg lo 0
.arg hi 0
.arg s0 0
.arg s1 0
.arg s2 0
.arg s3 0
.arg s4 0
    ldarg r0, 0
    ldarg r1, 1
    ldarg r5, 5
    ldarg r6, 6
    setf mte3, mte2, 0
    setf mte3, mte2, 1
L6:
    bge r0, r1, L39
    sub r2, r1, r0
    min r2, r2, 2048
    waitf mte3, mte2, 0
    add r3, r5, r0
    ld i64, 1x2048, 1, r2, @0x0, b0_1, r3, 0
    setf mte2, v, 0
    waitf mte2, v, 0
    vdup i64, 1x2048, 1, r2, @0x4000, 1.0
    vadd i64, 1x2048, 1, r2, @0x8000, @0x0, @0x4000
    setf v, mte3, 0
    waitf v, mte3, 0
    add r4, r6, r0
    st i64, 1x2048, 1, r2, b1_2, r4, 0, @0x8000
    setf mte3, mte2, 0
    add r0, r0, 2048
    bge r0, r1, L39
    sub r2, r1, r0
    min r2, r2, 2048
    waitf mte3, mte2, 1
    add r3, r5, r0
    ld i64, 1x2048, 1, r2, @0xc0a0, b0_1, r3, 0
    setf mte2, v, 1
    waitf mte2, v, 1
    vdup i64, 1x2048, 1, r2, @0x100a0, 1.0
    vadd i64, 1x2048, 1, r2, @0x140a0, @0xc0a0, @0x100a0
    setf v, mte3, 1
    waitf v, mte3, 1
    add r4, r6, r0
    st i64, 1x2048, 1, r2, b1_2, r4, 0, @0x140a0
    setf mte3, mte2, 1
    add r0, r0, 2048
    jmp L6
L39:
    waitf mte3, mte2, 0
    waitf mte3, mte2, 1
    end

; kernel 1: gather (class Rows { double: true })
; core function 0: units Kernel, tile 1, buffers [b0,b1,b2], workspace []
.kernel k_gather aiv
.gm b0_2 i64 [] inout
.gm b1_0 f32 [] inout
.gm b2_3 f32 [] inout
.arg lo 0
.arg hi 0
.arg s0 0
.arg s1 0
.arg s2 0
.arg s3 0
.arg s4 0
.arg s5 0
.arg s6 0
.arg s7 0
.arg s8 0
.arg s9 0
.arg s10 0
    ldarg r0, 0
    ldarg r1, 1
    setf mte3, mte2, 0
    setf mte3, mte2, 1
L4:
    bge r0, r1, L59
    ldarg r2, 3
    max r27, r2, 1
    ldarg r5, 10
    ldarg r6, 11
    ldarg r7, 12
    mov r3, r0
    ldarg r31, 4
    mul r31, r3, r31
    add r5, r5, r31
    ldarg r31, 6
    mul r31, r3, r31
    add r6, r6, r31
    ldarg r31, 8
    mul r31, r3, r31
    add r7, r7, r31
    waitf mte3, mte2, 0
    ld i64, 1x1, 1, 1, @0x17f40, b0_2, r5, 0
    ldg f32, 1x6132, 1, r2, @0xbfa0, b1_0, r6, 0, i64, @0x17f40, 0, 1, 5
    setf mte2, v, 0
    waitf mte2, v, 0
    vbcast i64, 1x6132, 1, r2, @0x0, @0x17f40
    setf v, mte3, 0
    waitf v, mte3, 0
    st f32, 1x6132, 1, r2, b2_3, r7, 0, @0xbfa0
    setf mte3, mte2, 0
    add r0, r0, 1
    bge r0, r1, L59
    ldarg r2, 3
    max r27, r2, 1
    ldarg r5, 10
    ldarg r6, 11
    ldarg r7, 12
    mov r3, r0
    ldarg r31, 4
    mul r31, r3, r31
    add r5, r5, r31
    ldarg r31, 6
    mul r31, r3, r31
    add r6, r6, r31
    ldarg r31, 8
    mul r31, r3, r31
    add r7, r7, r31
    waitf mte3, mte2, 1
    ld i64, 1x1, 1, 1, @0x2ff40, b0_2, r5, 0
    ldg f32, 1x6132, 1, r2, @0x23fa0, b1_0, r6, 0, i64, @0x2ff40, 0, 1, 5
    setf mte2, v, 1
    waitf mte2, v, 1
    vbcast i64, 1x6132, 1, r2, @0x18000, @0x2ff40
    setf v, mte3, 1
    waitf v, mte3, 1
    st f32, 1x6132, 1, r2, b2_3, r7, 0, @0x23fa0
    setf mte3, mte2, 1
    add r0, r0, 1
    jmp L4
L59:
    waitf mte3, mte2, 0
    waitf mte3, mte2, 1
    end
